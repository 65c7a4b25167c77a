// helper_string.h for labkit's CPU executor: the command-line helpers of NVIDIA's cuda-samples (labkit's
// own implementation of what the samples call: flags as -name or --name, values as -name=value), and
// sdkFindFilePath, which finds a sample's data files (helper_image.h's comparisons use it).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <strings.h>
#include <unistd.h>
#include <vector>

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
// A data file the sample reads, looked for where the samples' own header looks (from the working folder:
// ./, ./data/, then ../../Samples/<executable name>/ and ../../Samples/<group>/<executable name>/, with
// and without data/, two to four folders up, then ../../Common/data/ two to four up), then where labkit's
// runs put it: ../data/, beside the executable (argv[0] with a folder), and the program's source folder
// ($LABKIT_PROGRAM_DIR, set by labkit's runner, with and without data/).  A new string (free it), or
// nullptr with a line on stdout.
inline char* sdkFindFilePath(const char* filename, const char* executable_path) {
  if (!filename || !*filename) return nullptr;
  std::string name(filename);
  if (name[0] == '/') {
    if (access(filename, R_OK) == 0) return strdup(filename);
    printf("\nerror: sdkFindFilePath: file <%s> not found!\n", filename);
    return nullptr;
  }
  std::string exe_dir, exe_name;
  if (executable_path) {
    std::string e(executable_path);
    size_t k = e.find_last_of('/');
    exe_name = k == std::string::npos ? e : e.substr(k + 1);
    if (k != std::string::npos) exe_dir = e.substr(0, k + 1);
  }
  std::vector<std::string> dirs = {"./", "./data/"};
  if (!exe_name.empty()) {
    const char* groups[] = {"", "0_Introduction/", "1_Utilities/", "2_Concepts_and_Techniques/", "3_CUDA_Features/",
                            "4_CUDA_Libraries/", "5_Domain_Specific/", "6_Performance/"};
    for (const char* sub : {"", "data/"})
      for (const char* g : groups)
        for (const char* up : {"../../../../", "../../../", "../../"})
          dirs.push_back(std::string(up) + "Samples/" + g + exe_name + "/" + sub);
  }
  for (const char* up : {"../../../../", "../../../", "../../"}) dirs.push_back(std::string(up) + "Common/data/");
  dirs.push_back("../data/");
  if (!exe_dir.empty()) {
    dirs.push_back(exe_dir);
    dirs.push_back(exe_dir + "data/");
  }
  if (const char* env = getenv("LABKIT_PROGRAM_DIR")) {
    dirs.push_back(std::string(env) + "/");
    dirs.push_back(std::string(env) + "/data/");
  }
  for (auto& d : dirs) {
    std::string p = d + name;
    if (access(p.c_str(), R_OK) == 0) return strdup(p.c_str());
  }
  printf("\nerror: sdkFindFilePath: file <%s> not found!\n", filename);
  return nullptr;
}
