"""Compiling a kernel source for the CPU executor, with a cache.

A kernel file becomes one translation unit: the execution-model header, the
kernel's own text (behind a ``#line`` directive, so errors carry its own file
name and line numbers), then generated entry points that Python calls through
ctypes.  The executor's runtime (scheduler, barriers, launch), the same for every
kernel, is compiled once per build flavour into an object of its own that each
kernel module links in (build_runtime).  Shared objects are cached in the user
cache folder; the key covers the source, the header, the flags and the compiler's
version.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import KernelCompileError
from ..kernel_source import SourceInfo

HERE = Path(__file__).resolve().parent
HEADER = HERE / "include" / "labkit_cpu.h"
RUNNER = HERE / "runner.cpp"
RUNTIME = HERE / "runtime.cpp"
EXECUTOR_VERSION = "5"
# A kernel's translation unit with the runtime declared, not defined: it is linked in (labkit_cpu.h).
RUNTIME_LINKED = "-DLABKIT_RUNTIME_LINKED=1"

BASE_FLAGS = ("-std=c++17", "-fPIC", "-pthread", "-w", "-DLABKIT_CPU_EXECUTOR=1")
# GCC's report of each function's frame (to size fiber stacks) and stack-clash probes (a frame larger
# than a page touches every page, so an overflow hits the guard page instead of the next stack).
# -fno-finite-loops: C++ lets g++ delete a loop without side effects (a spin on a flag nothing
# sets), so a kernel that hangs on a GPU would return at once here; keep the loop, and let the
# watchdog report it.  -fstack-usage writes each function's frame size, the stack a worker needs.
GCC_FLAGS = ("-fstack-usage", "-fstack-clash-protection", "-fno-finite-loops")
# _FORTIFY_SOURCE as many distributions' compilers set it by default: the executor must work with its
# checked longjmp wherever it runs, so it is checked with it everywhere.
FAST_FLAGS = ("-O2", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=2")


@functools.lru_cache(maxsize=1)
def counting_arch_flags() -> tuple[str, ...]:
    """The counting build's flags for this processor.  FP32 instructions are counted in the host's
    code (counting.py), so a*b+c must become one fused multiply-add there, as nvcc makes it one FFMA:
    -ffp-contract=fast, and on x86-64 the FMA instructions (where the processor has them)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    return ("-mfma",) if re.search(r"^flags\s*:.*\bfma\b", flags, re.M) else ()


# The checks that run a launch in a process of their own, each in a build of its own:
# AddressSanitizer for the memory check (bounds of global and shared memory), ThreadSanitizer for
# the race check (accesses of two threads that nothing orders), and for the shuffled schedule
# ThreadSanitizer's instrumentation without its runtime: the executor's own functions at every memory
# access, where it may switch threads (labkit_interleave.h).
SANITIZER_FLAGS = {
    "address": ("-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"),
    "thread": ("-O1", "-g", "-fsanitize=thread", "-fno-omit-frame-pointer"),
    "interleave": ("-O1", "-g", "-fsanitize=thread", "-DLABKIT_INTERLEAVE=1"),
    "count": ("-O2", "-DLABKIT_COUNT=1", "-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
              "-fsanitize-coverage=trace-pc", "-fno-tree-vectorize", "-fno-tree-sra", "-ffp-contract=fast",
              "--param=avoid-fma-max-bits=0", "-fno-crossjumping", "-fno-tree-pre", *counting_arch_flags()),
}
# The counting build (labkit.counters: counting.py, labkit_count.h) has the same access hooks and
# one at each basic block (-fsanitize-coverage=trace-pc), no entry hooks; its code must make the
# accesses nvcc's makes: no vectorised loops (four lanes' floats in one access), and a float4 stays
# one 16-byte access (scalar replacement of aggregates would split it).  Its FP32 instructions must be
# nvcc's too: every a*b + c one FMA, also a loop's accumulator's, which g++ leaves as a multiply and
# an add under tunings that avoid chains of FMAs (-mtune=znver2, for one; the H100 comparison's
# host compiler did): avoid-fma-max-bits=0 turns that off.  Each instruction must stay in the basic
# block whose hook counts its runs: cross-jumping would merge two blocks' identical tails into one
# of them, whose hook then misses the other's runs (the GEMM epilogue's bias adds).  And a load must
# stay where nvcc keeps it: partial-redundancy elimination drops the first iteration's load of a
# window loop that reads what was read just before it (max_pool2d's xp[0]), which nvcc does not.
# Linked without the sanitizer's runtime (the runner too); every hook must be defined (-z defs).
RUNTIME_FREE = {"interleave", "count"}
# Flags of a build that its runtime object is compiled without: the counting build's hooks and
# bookkeeping live there, and must not call themselves.
INSTRUMENTATION = {"count": ("-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                             "-fsanitize-coverage=trace-pc")}


def headers_text() -> str:
    """Every header the executor compiles kernels against (the execution model, cooperative_groups,
    <cuda/barrier>: some have no .h): part of each cached module's key, so that an edit to any of them
    compiles again."""
    return "".join(p.read_text() for p in sorted(HEADER.parent.rglob("*")) if p.is_file() and p.suffix != ".gch")


def cache_dir() -> Path:
    root = os.environ.get("LABKIT_CACHE_DIR") or os.path.join(Path.home(), ".cache", "labkit")
    d = Path(root) / "cpu-executor"
    d.mkdir(parents=True, exist_ok=True)
    return d


SEED_ENV = "LABKIT_CACHE_SEED"


def seeded(name: str) -> Path:
    """``cache_dir() / name``, or the same name in ``$LABKIT_CACHE_SEED`` where that read-only folder
    holds it: the executor's own parts (its runtime, its precompiled header, its check runners), built
    by a trusted process and handed read-only to a sandbox whose cache starts empty.  Kernels are never
    taken from it."""
    seed = os.environ.get(SEED_ENV)
    if seed and (Path(seed) / name).exists():
        return Path(seed) / name
    return cache_dir() / name


@functools.lru_cache(maxsize=None)
def compiler() -> tuple[str, str]:
    """(path, version line) of the host C++ compiler: $CXX, else g++, c++ or clang++."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    for name in names:
        path = shutil.which(name)
        if path:
            out = subprocess.run([path, "--version"], capture_output=True, text=True)
            return path, (out.stdout.splitlines() or ["unknown"])[0]
    raise KernelCompileError(
        "the CPU executor needs a C++17 compiler and found none (looked for "
        + ", ".join(names) + "). Install g++ (Debian/Ubuntu: apt-get install g++; macOS: "
        "xcode-select --install) or name one in the CXX environment variable.")


def is_gcc(version: str) -> bool:
    return "clang" not in version.lower()


def entry_points(info: SourceInfo, name_expressions: tuple[str, ...]) -> tuple[str, list[str]]:
    """C++ text of the generated entry points, and the launchable names in index order."""
    names = list(info.kernels) + [e for e in name_expressions if e not in info.kernels]
    lines = ['extern "C" {',
             "const char* labkit_error(void) { return ::labkit::last_error().c_str(); }",
             "unsigned long long labkit_switches(void) { return ::labkit::last_switches(); }",
             "void labkit_release(void) { ::labkit::release_workers(); }"]
    for i, name in enumerate(names):
        quoted = name.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f"int labkit_launch_{i}(const ::labkit::LaunchConfig* c, void** a) "
                     f'{{ return ::labkit::launch(&{name}, "{quoted}", c, a); }}')
        lines.append(f"const char* labkit_sig_{i}(void) {{ return ::labkit::signature(&{name}); }}")
    for i, name in enumerate(info.constants + info.globals):
        lines.append(f"void* labkit_sym_{i}(void) {{ return (void*)&{name}; }}")
        lines.append(f"unsigned long long labkit_symsize_{i}(void) {{ return sizeof({name}); }}")
    lines.append("}")
    return "\n".join(lines) + "\n", names


def translation_unit(code: str, path: str, entries: str) -> str:
    shown = path.replace("\\", "/").replace('"', "'")
    # The header by name: found on the include path, where a precompiled copy may wait (header_dir).
    return (f'#include "{HEADER.name}"\n#line 1 "{shown}"\n{code}\n'
            f'#line 1 "labkit-cpu-entry-points"\n{entries}')


def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


CHECK_OF = {"address": "memory check", "thread": "race check", "interleave": "shuffled schedule"}


def run_compiler(cmd: list[str], path: str, sanitizer: str | None = None) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        msg = res.stderr.strip()
        lib = {"address": "asan", "thread": "tsan"}.get(sanitizer or "")
        if lib and re.search(rf"cannot find -l{lib}|lib{lib}[^\n]*(No such file|not found)|"
                             rf"unsupported option '-fsanitize={sanitizer}'", msg):
            raise KernelCompileError(
                f"the {CHECK_OF[sanitizer]} needs the host compiler's {sanitizer.title()}Sanitizer "
                f"(lib{lib}), which is not installed here: install it (Debian/Ubuntu: the libgcc "
                f"development package of your g++, e.g. lib{lib}8; conda: the gcc package), or run "
                f"without this check\n\n--- compiler output ---\n{msg[-2000:]}")
        # Put the lines about the kernel file itself first: they are the ones to fix.
        own = [ln for ln in msg.splitlines() if ln.startswith(path)]
        head = "\n".join(own[:20]) if own else msg[-4000:]
        raise KernelCompileError(
            f"the host compiler refused {path} (CPU executor):\n{head}\n\n--- full compiler output ---\n"
            f"{msg[-8000:]}")


def header_dir(cxx: str, version: str, flags: list[str]) -> Path:
    """Where the kernels' compile finds the executor's headers: a copy in the cache with the main
    header precompiled for these flags (GCC reads a .gch beside a header in place of parsing it, a
    third of a small kernel's compile), or the package's own folder where that cannot be made."""
    if not is_gcc(version):
        return HEADER.parent
    pch_flags = [f for f in flags if f not in ("-shared", "-c")]
    d = seeded(f"headers-{cache_key(EXECUTOR_VERSION, headers_text(), ' '.join(pch_flags), version)}")
    if (d / f"{HEADER.name}.gch").exists():
        return d
    d = cache_dir() / d.name
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        copy = Path(tmp) / "include"
        shutil.copytree(HEADER.parent, copy)
        res = subprocess.run([cxx, *pch_flags, "-x", "c++-header", str(copy / HEADER.name),
                              "-o", str(copy / f"{HEADER.name}.gch")], capture_output=True, text=True)
        if res.returncode != 0:
            return HEADER.parent      # compile against the header itself, as without a cache
        try:
            os.replace(copy, d)       # atomic; where another process was first, its copy serves
        except OSError:
            pass
    return d if (d / f"{HEADER.name}.gch").exists() else HEADER.parent


def largest_frame(folder: Path) -> int:
    """The largest frame in the compiler's -fstack-usage reports (*.su) in ``folder``; 0 where none."""
    frames = [int(line.split("\t")[1]) for su in folder.glob("*.su")
              for line in su.read_text().splitlines() if line.count("\t") >= 2]
    return max(frames, default=0)


# Runtime objects that failed to build in this process (by path): not tried again for every kernel.
_runtime_failed: set[Path] = set()


def build_runtime(cxx: str, version: str, flags: list[str], sanitizer: str | None = None,
                  fresh: bool = False) -> Path | None:
    """The executor's runtime (runtime.cpp) compiled with a kernel build's ``flags`` into a cached
    object, once for every kernel of that build; None where it cannot be made (the kernel is then
    compiled with the whole runtime inline, as one translation unit).  Beside it, ``.stack``: its
    largest frame, which a fiber's stack must hold as well as the kernel's."""
    obj_flags = [f for f in flags if f != "-shared"]
    key = cache_key(EXECUTOR_VERSION, RUNTIME.read_text(), headers_text(), " ".join(obj_flags), version)
    out = seeded(f"runtime-{sanitizer or 'fast'}-{key}.o")
    if out.exists() and not fresh:
        return out
    out = cache_dir() / out.name
    if out in _runtime_failed:
        return None
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        obj = Path(tmp) / "runtime.o"
        res = subprocess.run([cxx, *obj_flags, "-c", "-I", str(HEADER.parent), "-o", str(obj), str(RUNTIME)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            _runtime_failed.add(out)
            return None
        stack = Path(tmp) / "runtime.stack"
        stack.write_text(str(largest_frame(Path(tmp))))
        os.replace(stack, out.with_suffix(".stack"))   # first: the object's presence vouches for it
        os.replace(obj, out)
    return out


def build(tu: str, path: str, *, sanitizer: str | None = None, fresh: bool = False) -> Path:
    """Compile a translation unit into a cached shared object and return its path (``sanitizer``:
    'address' or 'thread', for a checking runner; ``fresh``: compile again even where the cache has
    one, to replace a damaged file)."""
    cxx, version = compiler()
    if sanitizer == "count" and not is_gcc(version):
        raise KernelCompileError(
            f"labkit.counters needs GCC's g++ (its instrumentation options, its disassembly), and the CPU "
            f"executor's compiler here is {version!r}: install g++ and name it in the CXX environment variable")
    flags = list(BASE_FLAGS) + list(SANITIZER_FLAGS[sanitizer] if sanitizer else FAST_FLAGS) + ["-shared"]
    if is_gcc(version):
        # Without this, GCC makes inline variables process-wide ("unique") symbols, and two kernel
        # modules would share one scheduler state, or the __shared__ arrays of an inline function.
        flags.append("-fno-gnu-unique")
        flags += GCC_FLAGS
    plain = INSTRUMENTATION.get(sanitizer or "", ())
    runtime = build_runtime(cxx, version, [f for f in flags if f not in plain], sanitizer, fresh)
    if runtime is not None:
        flags.append(RUNTIME_LINKED)   # in the flags, hence in the key and the precompiled header's
    key = cache_key(EXECUTOR_VERSION, tu, headers_text(), " ".join(flags), version,
               runtime.name if runtime is not None else "")
    out = cache_dir() / f"{sanitizer + '-' if sanitizer else ''}{key}.so"
    if out.exists() and not fresh:
        return out
    include = header_dir(cxx, version, flags)
    linked = [str(runtime)] if runtime is not None else []
    # Source lines in a sanitizer's report read as the kernel's path was given ("conv.cu:12"), not
    # joined to the folder that happened to compile it first (the cached library serves every folder).
    where = [f"-fdebug-prefix-map={os.getcwd()}=."]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        src = Path(tmp) / "kernel.cpp"
        src.write_text(tu)
        obj = Path(tmp) / "kernel.so"
        if sanitizer in RUNTIME_FREE:
            o = Path(tmp) / "kernel.o"
            run_compiler([cxx, *flags, *where, "-c", "-I", str(include), "-o", str(o), str(src)], path, sanitizer)
            run_compiler([cxx, *BASE_FLAGS, "-shared", "-Wl,-z,defs", "-o", str(obj), str(o), *linked], path)
        else:
            run_compiler([cxx, *flags, *where, "-I", str(include), "-o", str(obj), str(src), *linked],
                          path, sanitizer)
        # The largest frame a fiber may hold: the kernel's own, or one of the runtime's (a barrier's).
        largest = largest_frame(Path(tmp))
        if runtime is not None:
            try:
                largest = max(largest, int(runtime.with_suffix(".stack").read_text()))
            except (OSError, ValueError):
                pass
        out.with_suffix(".stack").write_text(str(largest))
        os.replace(obj, out)  # atomic: a concurrent build of the same key is harmless
    return out


def build_runner(sanitizer: str) -> Path:
    """The program, linked with a sanitizer, that runs one launch for a check in a process of its own."""
    cxx, version = compiler()
    flags = list(BASE_FLAGS) + (["-O1", "-g"] if sanitizer in RUNTIME_FREE else list(SANITIZER_FLAGS[sanitizer]))
    key = cache_key(EXECUTOR_VERSION, RUNNER.read_text(), headers_text(), " ".join(flags), version)
    out = seeded(f"runner-{sanitizer}-{key}")
    if out.exists():
        return out
    out = cache_dir() / out.name
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        exe = Path(tmp) / "runner"
        run_compiler([cxx, *flags, "-I", str(HEADER.parent), "-o", str(exe), str(RUNNER), "-ldl"],
                      str(RUNNER), sanitizer)
        os.replace(exe, out)
    return out


# Frames up to 32 KiB fit the default stack; a larger one gets its size plus 64 KiB for the calls
# around it (the executor's scheduler, printf, the math library).
SMALL_FRAME = 1 << 15
CALL_ROOM = 1 << 16


def stack_need(so: Path) -> int:
    """Bytes of stack a fiber needs for the largest frame the compiler reported in this module (its
    locals), plus room for the calls around it; 0 where the compiler gives no report."""
    try:
        largest = int(Path(so).with_suffix(".stack").read_text())
    except (OSError, ValueError):
        return 0
    return largest + CALL_ROOM if largest > SMALL_FRAME else 0


_instances = itertools.count()


def load_private(so: Path, rebuild=None) -> ctypes.CDLL:
    """Load a private copy of a cached shared object.

    The loader returns the same handle for the same path, so two modules built from
    one source would share their __constant__ and __device__ variables; on a GPU,
    each module has its own.  A copy under a unique name gives each module its own
    globals; the copy is removed once loaded (the mapping stays).  A cached file that does not load
    (damaged: a disk full, a killed build) is built again by ``rebuild()``, once.
    """
    tmp = cache_dir() / f".instance-{os.getpid()}-{next(_instances)}-{so.name}"
    shutil.copyfile(so, tmp)
    try:
        return ctypes.CDLL(str(tmp), mode=getattr(os, "RTLD_LOCAL", 0))
    except OSError:
        if rebuild is None:
            raise
        return load_private(rebuild())
    finally:
        tmp.unlink(missing_ok=True)
