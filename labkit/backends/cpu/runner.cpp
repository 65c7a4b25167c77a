// runner.cpp -- runs one kernel launch under AddressSanitizer, for the memory check.
//
// Python writes the launch to a file (an in-memory one where the system has them): the kernel's entry index, the launch
// configuration, the contents of the module's __constant__/__device__ symbols,
// and every argument (arrays by contents).  This program copies each array into
// a heap block of exactly its size -- AddressSanitizer surrounds such blocks
// with poisoned bytes, so a read or write one element past the end is reported
// with the kernel's source line -- launches, and writes the arrays back.
//
// usage: runner KERNEL.so LAUNCH.in RESULT.out
#include "labkit_cpu.h"

#include <dlfcn.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <fstream>
#include <iterator>

namespace {
[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "LABKIT-RUNNER-ERROR: %s\n", msg.c_str());
  std::exit(2);
}

struct Reader {
  std::vector<char> buf;
  size_t pos = 0;
  template <class T> T get() {
    if (pos + sizeof(T) > buf.size()) die("launch file is truncated");
    T v;
    std::memcpy(&v, buf.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  const char* bytes(size_t n) {
    if (pos + n > buf.size()) die("launch file is truncated");
    const char* p = buf.data() + pos;
    pos += n;
    return p;
  }
};

template <class F> F sym(void* lib, const std::string& name) {
  void* p = dlsym(lib, name.c_str());
  if (!p) die("missing entry point " + name);
  return reinterpret_cast<F>(p);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) die("usage: runner KERNEL.so LAUNCH.in RESULT.out");
#ifdef __linux__
  // End with the notebook's kernel: a launch left running after it was killed would spin on alone.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 2;
#endif
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) die(std::string("cannot load kernel: ") + dlerror());
  Reader r;
  {
    std::ifstream in(argv[2], std::ios::binary);
    r.buf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (std::string(r.bytes(8), 8) != std::string("LKRUN001", 8)) die("not a launch file");
  const unsigned entry = r.get<unsigned>();
  const unsigned nargs = r.get<unsigned>();
  const unsigned nsyms = r.get<unsigned>();
  const auto cfg = r.get<labkit::LaunchConfig>();

  std::vector<void*> sym_ptr(nsyms);
  std::vector<unsigned long long> sym_size(nsyms);
  for (unsigned s = 0; s < nsyms; ++s) {
    unsigned idx = r.get<unsigned>();
    unsigned long long n = r.get<unsigned long long>();
    sym_ptr[s] = sym<void* (*)()>(lib, "labkit_sym_" + std::to_string(idx))();
    sym_size[s] = sym<unsigned long long (*)()>(lib, "labkit_symsize_" + std::to_string(idx))();
    if (n != sym_size[s]) die("symbol size mismatch");
    std::memcpy(sym_ptr[s], r.bytes(n), n);
  }

  std::vector<void*> values(nargs);        // where each argument's value lives
  std::vector<void*> arrays(nargs, nullptr);
  std::vector<unsigned long long> sizes(nargs);
  std::vector<void*> array_ptr_slot(nargs);
  for (unsigned a = 0; a < nargs; ++a) {
    unsigned char kind = r.get<unsigned char>();
    unsigned long long n = r.get<unsigned long long>();
    if (kind == 2) {            // the same array as argument n (one array passed twice): one block
      if (n >= a || !arrays[n]) die("an alias of an argument that is not an array");
      array_ptr_slot[a] = arrays[n];
      values[a] = &array_ptr_slot[a];
      continue;
    }
    sizes[a] = n;
    const char* data = r.bytes(n);
    if (kind == 1) {
      arrays[a] = std::malloc(n ? n : 1);
      std::memcpy(arrays[a], data, n);
      array_ptr_slot[a] = arrays[a];
      values[a] = &array_ptr_slot[a];
      // Python maps an address in a report back to the argument it belongs to.
      std::fprintf(stderr, "LABKIT-ARG %u %p %llu\n", a, arrays[a], n);
    } else {
      values[a] = std::malloc(n ? n : 1);
      std::memcpy(values[a], data, n);
    }
  }
  auto launch = sym<int (*)(const labkit::LaunchConfig*, void**)>(lib, "labkit_launch_" + std::to_string(entry));
  int rc = launch(&cfg, values.data());
  if (rc != 0) {
    std::fprintf(stderr, "LABKIT-LAUNCH-ERROR: %s\n", sym<const char* (*)()>(lib, "labkit_error")());
    std::fflush(stderr);
    _exit(3);   // no clean-up: the failed block's threads were abandoned mid-run, a checker would see them
  }
  std::ofstream out(argv[3], std::ios::binary);
  for (unsigned a = 0; a < nargs; ++a)
    if (arrays[a]) out.write(static_cast<const char*>(arrays[a]), std::streamsize(sizes[a]));
  for (unsigned s = 0; s < nsyms; ++s)
    out.write(static_cast<const char*>(sym_ptr[s]), std::streamsize(sym_size[s]));
  return 0;
}
