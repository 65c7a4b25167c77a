// helper_string.h for labkit's CPU executor: the command-line helpers of NVIDIA's cuda-samples
// (labkit's own implementation of what the samples call: flags as -name or --name, values as -name=value).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <strings.h>
#include <unistd.h>

#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif
#define STRCASECMP strcasecmp
#define STRNCASECMP strncasecmp
#define STRCPY(sFilePath, nLength, sPath) strcpy(sFilePath, sPath)
#define FOPEN(fHandle, filename, mode) (fHandle = fopen(filename, mode))
#define FOPEN_FAIL(result) (result == NULL)
#define SSCANF sscanf
#define SPRINTF sprintf

// How many leading `delimiter` characters `string` has (1 for "-flag", 2 for "--flag").
inline int stringRemoveDelimiter(char delimiter, const char* string) {
  int n = 0;
  while (string[n] == delimiter) n++;
  return n >= int(strlen(string)) - 1 ? 0 : n;
}
inline int getFileExtension(char* filename, char** extension) {
  int len = int(strlen(filename));
  while (len > 0 && filename[len - 1] != '.') len--;
  if (len == 0) return 0;
  *extension = &filename[len];
  return int(strlen(filename)) - len;
}
namespace labkit_helpers {
// The value part of argv[i] if it is `-name` or `-name=...` (case-insensitive), else nullptr; `exact`: no value.
inline const char* match(const char* arg, const char* name, bool* has_value) {
  const char* a = arg + stringRemoveDelimiter('-', arg);
  const char* eq = strchr(a, '=');
  size_t len = eq ? size_t(eq - a) : strlen(a);
  if (len != strlen(name) || strncasecmp(a, name, len) != 0) return nullptr;
  *has_value = eq != nullptr;
  return eq ? eq + 1 : a + len;
}
}  // namespace labkit_helpers
inline bool checkCmdLineFlag(const int argc, const char** argv, const char* string_ref) {
  for (int i = 1; i < argc; i++) {
    bool v;
    if (argv[i][0] == '-' && labkit_helpers::match(argv[i], string_ref, &v)) return true;
  }
  return false;
}
template <class T> inline bool getCmdLineArgumentValue(const int argc, const char** argv, const char* string_ref, T* value) {
  for (int i = 1; i < argc; i++) {
    bool v = false;
    const char* s = argv[i][0] == '-' ? labkit_helpers::match(argv[i], string_ref, &v) : nullptr;
    if (s && v) {
      *value = (T)atof(s);
      return true;
    }
  }
  return false;
}
inline int getCmdLineArgumentInt(const int argc, const char** argv, const char* string_ref) {
  for (int i = 1; i < argc; i++) {
    bool v = false;
    const char* s = argv[i][0] == '-' ? labkit_helpers::match(argv[i], string_ref, &v) : nullptr;
    if (s) return v ? atoi(s) : 0;
  }
  return 0;
}
inline float getCmdLineArgumentFloat(const int argc, const char** argv, const char* string_ref) {
  for (int i = 1; i < argc; i++) {
    bool v = false;
    const char* s = argv[i][0] == '-' ? labkit_helpers::match(argv[i], string_ref, &v) : nullptr;
    if (s) return v ? float(atof(s)) : 0.f;
  }
  return 0.f;
}
inline bool getCmdLineArgumentString(const int argc, const char** argv, const char* string_ref, char** string_retval) {
  for (int i = 1; i < argc; i++) {
    bool v = false;
    const char* s = argv[i][0] == '-' ? labkit_helpers::match(argv[i], string_ref, &v) : nullptr;
    if (s && v) {
      *string_retval = const_cast<char*>(s);
      return true;
    }
  }
  *string_retval = nullptr;
  return false;
}
// A data file the sample reads: looked for beside the working folder, in ./data and ../data, and beside
// the program's own executable; a new string (free it) or nullptr.
inline char* sdkFindFilePath(const char* filename, const char* executable_path) {
  std::string exe_dir;
  if (executable_path) {
    std::string e(executable_path);
    size_t k = e.find_last_of('/');
    if (k != std::string::npos) exe_dir = e.substr(0, k + 1);
  }
  const char* env = getenv("LABKIT_PROGRAM_DIR");
  std::string dirs[] = {"", "./", "./data/", "../data/", exe_dir, exe_dir + "data/",
                        env ? std::string(env) + "/" : std::string("./"), env ? std::string(env) + "/data/" : std::string("./data/")};
  for (auto& d : dirs) {
    std::string p = d + filename;
    if (access(p.c_str(), R_OK) == 0) return strdup(p.c_str());
  }
  return nullptr;
}
