"""Whole CUDA programs (host and device code) built for the CPU executor and run in a process of their own.

A program's ``.cu`` files are compiled by the host C++ compiler as C++, each with the execution model
(``include/labkit_cpu.h``) and the runtime API (``program_include/cuda_runtime.h``) in front, as nvcc
puts ``cuda_runtime.h`` in front of every ``.cu`` file; its ``.cpp`` files as they are.  A program that
uses Thrust or libcu++ is compiled against CCCL's headers (cccl.py, program_include/labkit_cccl.h).  Launches and
``__shared__`` declarations are rewritten first (program_source.py); so are the headers beside the
program's files, which may hold kernels too: rewritten copies in a build folder are found first,
each behind a ``#line`` directive that keeps its own name and line numbers in messages.  The
objects are linked with the executor's runtime (compiler.build_runtime) into an executable, cached
by the sources, headers, flags and compiler.

The checking modes run the same program in another build: ``memory`` with AddressSanitizer (every
cudaMalloc and malloc is a heap block it guards, ``__shared__`` arrays too), ``race`` with
ThreadSanitizer (one fiber per CUDA thread), ``shuffle`` with the shuffled schedule's build; the
``barrier`` check is a flag of any build ($LABKIT_CHECK, read by the runtime API at each launch).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import KernelCompileError
from . import cccl, compiler, program_source

PROGRAM_INCLUDE = Path(__file__).resolve().parent / "program_include"
SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".hxx", ".inl", ".cu.h")
CHECK_BUILDS = {"memory": "address", "race": "thread", "shuffle": "interleave"}
PROGRAM_CHECKS = ("memory", "barrier", "shuffle", "race")
# Exit status of a program the executor stopped: a read of pinned memory an asynchronous copy writes.
UNSYNCHRONISED_READ = 77
ASAN_OPTIONS = "detect_leaks=0:exitcode=86:halt_on_error=1:allocator_may_return_null=1"
TSAN_OPTIONS = "halt_on_error=1:exitcode=87:report_signal_unsafe=0:report_thread_leaks=0:detect_deadlocks=0"


@dataclass
class Program:
    exe: Path
    stack_need: int       # bytes of stack a CUDA thread needs (the largest frame the compiler reported)
    sources: list[Path]
    build: str | None     # the sanitizer build ('address', 'thread', 'interleave') or None


def sources_of(paths: list[str | os.PathLike]) -> list[Path]:
    """The source files a program is built from: each file given, every source file of a folder given."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in SOURCE_SUFFIXES and f.is_file())
            if not found:   # a sample may keep its sources in a folder of their own (src/)
                found = sorted(f for f in p.glob("*/*") if f.suffix in SOURCE_SUFFIXES and f.is_file())
            if not found:
                raise FileNotFoundError(f"{p}: a folder with no CUDA or C++ source files (.cu, .cpp)")
            out += found
        elif p.is_file():
            if p.suffix not in SOURCE_SUFFIXES:
                raise ValueError(f"{p}: not a source file ({', '.join(SOURCE_SUFFIXES)})")
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file")
    if not out:
        raise ValueError("no source files given")
    return out


def _headers(folders: list[Path]) -> dict[str, Path]:
    """{relative name: path} of the headers in the program's folders (and their subfolders, two deep)."""
    out: dict[str, Path] = {}
    for d in folders:
        for depth in ("*", "*/*", "*/*/*"):
            for f in d.glob(depth):
                if f.is_file() and any(f.name.endswith(s) for s in HEADER_SUFFIXES):
                    out.setdefault(str(f.relative_to(d)), f)
    return out


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#\s*include\s*"([^"]+)"', re.M)


def _outside_headers(sources: list[Path], headers: dict[str, Path]) -> dict[str, Path]:
    """Headers that the program's files include by a path leaving their folders (``"../inc/x.h"``, as
    the cuda-samples keep ``src/`` and ``inc/`` side by side), found transitively: {name under the
    build's include folder (the path, normalised), path}.  A rewritten copy
    placed there is found first through ``-I include``, as the original is found beside ``src/``."""
    out: dict[str, Path] = {}
    todo = list(sources) + list(headers.values())
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        for m in _QUOTED_INCLUDE.finditer(text):
            rel = m.group(1)
            if ".." not in Path(rel).parts:
                continue
            target = (f.parent / rel).resolve()
            name = os.path.normpath(rel)
            if (not target.is_file() or not name.startswith("../") or name.startswith("../../")
                    or not any(target.name.endswith(x) for x in HEADER_SUFFIXES)):
                continue
            out.setdefault(name, target)
            todo.append(target)
    return out


def _line_directive(path: Path) -> str:
    return '#line 1 "' + str(path).replace("\\", "/").replace('"', "'") + '"\n'


def _flags(build: str | None) -> list[str]:
    flags = list(compiler.BASE_FLAGS) + list(compiler.SANITIZER_FLAGS[build] if build else compiler.FAST_FLAGS)
    _cxx, version = compiler.compiler()
    if compiler.is_gcc(version):
        flags += ["-fno-gnu-unique", *compiler.GCC_FLAGS]
    return flags + ["-DLABKIT_PROGRAM=1"]


def build(paths: list[str | os.PathLike], *, check: str | None = None, fresh: bool = False) -> Program:
    """Build a program from its source files (``check``: 'memory', 'race' or 'shuffle' for that check's
    build).  Raises UnsupportedOnCPU for what the executor does not model, KernelCompileError where the
    compiler refuses the program."""
    sources = sources_of(paths)
    build_kind = CHECK_BUILDS.get(check or "")
    folders = sorted({s.resolve().parent for s in sources})
    # A folder given whose sources sit in a subfolder (src/) keeps its headers in another (inc/), which
    # a sample's build names as an include folder: each subfolder with headers is one here too.
    for given in (Path(p).resolve() for p in paths if Path(p).is_dir()):
        if given in folders:
            continue
        for d in sorted(x for x in given.iterdir() if x.is_dir()):
            if d not in folders and any(f.is_file() and f.name.endswith(HEADER_SUFFIXES) for f in d.iterdir()):
                folders.append(d)
    headers = _headers(folders)
    for name, h in _outside_headers(sources, headers).items():
        headers.setdefault(name, h)
    texts: dict[str, str] = {}
    originals = {str(f): f.read_text(errors="replace") for f in [*sources, *headers.values()]}
    defined = program_source.defined_macros(list(originals.values()))
    for s in sources:
        src = originals[str(s)]
        program_source.check_program_supported(src, str(s), defined)
        texts[s.name] = _line_directive(s) + program_source.rewrite_program(src, str(s))
    for rel, h in headers.items():
        src = originals[str(h)]
        program_source.check_program_supported(src, str(h), defined)
        texts["include/" + rel] = ("#pragma once\n" if "#pragma once" in src else "") + _line_directive(h) + \
            program_source.rewrite_program(src, str(h))
    program_source.check_runtime_calls(originals, defined)
    cxx, version = compiler.compiler()
    flags = _flags(build_kind)
    # Thrust and libcu++: CCCL's headers after the executor's (which put the executor's device memory
    # under Thrust's C++ system: program_include/thrust/), the C++ system as Thrust's device system.
    cccl_dir = cccl.include_dir() if any(program_source.CCCL_HEADERS.search(t) for t in texts.values()) else None
    if cccl_dir:
        flags += ["-isystem", str(cccl_dir), "-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP", "-DCCCL_DISABLE_NVTX"]
    plain = compiler.INSTRUMENTATION.get(build_kind or "", ())
    runtime = compiler.build_runtime(cxx, version, [f for f in flags if f not in plain and f != "-DLABKIT_PROGRAM=1"],
                                     build_kind, fresh)
    if runtime is None:
        raise KernelCompileError("the CPU executor's runtime could not be compiled here; run a kernel through "
                                 "labkit.CPUModule to see the compiler's message")
    flags.append(compiler.RUNTIME_LINKED)
    key = compiler.cache_key(compiler.EXECUTOR_VERSION, "program", *sorted(f"{k}\0{v}" for k, v in texts.items()),
                        compiler.headers_text(), "".join(p.read_text() for p in sorted(PROGRAM_INCLUDE.rglob("*.*"))),
                        " ".join(flags), version, runtime.name, *(str(f) for f in folders),
                        f"{cccl_dir} {cccl.thrust_version(cccl_dir)}" if cccl_dir else "")
    out_dir = compiler.cache_dir() / "programs"
    out_dir.mkdir(exist_ok=True)
    exe = out_dir / f"{build_kind + '-' if build_kind else ''}{key}"
    stack_file = exe.with_suffix(".stack")
    if exe.exists() and stack_file.exists() and not fresh:
        return Program(exe, int(stack_file.read_text() or 0), sources, build_kind)
    with tempfile.TemporaryDirectory(dir=compiler.cache_dir()) as tmp:
        tmp = Path(tmp)
        inc = tmp / "include"
        inc.mkdir()
        for name, text in texts.items():
            f = tmp / name
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text)
        objs = []
        # OpenMP, where a program uses it (its host threads, each issuing work).
        omp = ["-fopenmp"] if any(re.search(r"#\s*include\s*<omp\.h>|#\s*pragma\s+omp\b", t) for t in texts.values()) else []
        flags += omp
        for s in sources:
            cu = s.suffix == ".cu"
            front = ["-include", "labkit_cpu.h", "-include", "cuda_runtime.h", "-D__CUDACC__=1", "-D__NVCC__=1",
                     "-D__CUDACC_VER_MAJOR__=12", "-D__CUDACC_VER_MINOR__=4"] if cu else []
            if cu and cccl_dir:
                front += ["-include", "labkit_cccl.h"]
            lang = ["-x", "c++"] if cu or s.suffix != ".c" else ["-x", "c"]
            obj = tmp / (s.name + ".o")
            cmd = [cxx, *flags, f"-fdebug-prefix-map={tmp}=.", *front, "-I", str(inc),
                   "-I", str(PROGRAM_INCLUDE), "-I", str(compiler.HEADER.parent),
                   *[a for d in folders for a in ("-I", str(d))], "-c", *lang, str(tmp / s.name), "-o", str(obj)]
            if s.suffix == ".c":
                cmd = [c for c in cmd if c not in ("-std=c++17", "-fno-gnu-unique")]
            compiler.run_compiler(cmd, str(s), build_kind if build_kind in ("address", "thread") else None)
            objs.append(str(obj))
        link_flags = list(compiler.BASE_FLAGS) if build_kind in compiler.RUNTIME_FREE else flags
        link = [cxx, *link_flags, "-o", str(tmp / "program"), *objs, str(runtime), "-ldl", "-lm"]
        if build_kind in compiler.RUNTIME_FREE:
            link.insert(1, "-Wl,-z,defs")
        compiler.run_compiler(link, str(sources[0]))
        largest = compiler.largest_frame(tmp)
        try:
            largest = max(largest, int(runtime.with_suffix(".stack").read_text()))
        except (OSError, ValueError):
            pass
        need = largest + compiler.CALL_ROOM if largest > compiler.SMALL_FRAME else 0
        stack_file.write_text(str(need))
        os.replace(tmp / "program", exe)
    return Program(exe, need, sources, build_kind)


def _explain_memory(stderr: str, sources: list[Path]) -> str:
    """A headline for an AddressSanitizer report: what was accessed, where in the program."""
    lines = stderr.splitlines()
    summary = next((ln for ln in lines if "ERROR: AddressSanitizer" in ln), "")
    access = next((ln.strip() for ln in lines if re.match(r"\s*(READ|WRITE) of size", ln)), "")
    names = tuple(s.name for s in sources)
    frames = [ln.strip() for ln in lines if re.match(r"\s*#\d+ ", ln)]
    where = next((f for f in frames if any(n in f for n in names)), "")
    region = re.search(r"is located (\d+ bytes (?:to the right of|to the left of|after|before|inside of) "
                       r"\d+-byte region) \[(0x[0-9a-f]+),", stderr)
    allocs = {int(m.group(1), 16): (m.group(2), m.group(3))
              for m in re.finditer(r"LABKIT-ALLOC (0x[0-9a-f]+) (\d+) (\S+)", stderr)}
    freed = "freed by thread" in stderr
    parts = ["labkit memory check: the program made an invalid memory access"]
    if access:
        parts.append("  " + access.split(" at pc")[0].split(" thread")[0])
    if region:
        site = allocs.get(int(region.group(2), 16))
        at = site[1][:-2] if site and site[1].endswith(":0") else site[1] if site else ""   # :0, a library's
        parts.append("  " + region.group(1) + (f", the cudaMalloc at {at}" if site else "")
                     + (" (freed: a use after free)" if freed else ""))
    if where:
        parts.append("  at " + where.split(" in ", 1)[-1])
    if summary:
        parts.append("  (" + summary.split("ERROR: ")[-1].strip() + ")")
    return "\n".join(parts)


def _explain_race(stderr: str, sources: list[Path]) -> str:
    """A headline for a ThreadSanitizer report: the two accesses, their lines, the shared array if named."""
    names = tuple(s.name for s in sources)
    accesses = []
    for block in re.split(r"\n\s*\n", stderr):
        m = re.search(r"(Previous )?((?:[Aa]tomic )?(?:[Rr]ead|[Ww]rite)) of size (\d+) at (0x[0-9a-f]+)", block)
        if not m:
            continue
        line = next((f.group(1) for f in re.finditer(r"#\d+ \S+.*? (\S+:\d+)", block) if f.group(1).startswith(names)
                     or any(n in f.group(1) for n in names)), "?")
        accesses.append((m.group(2).lower(), line, int(m.group(4), 16)))
    shared = {int(m.group(2), 16): (m.group(1), int(m.group(3)))
              for m in re.finditer(r"LABKIT-SHARED (\S+) (0x[0-9a-f]+) (\d+)", stderr)}
    head = "labkit race check: two CUDA threads accessed one location, at least one writing, with nothing ordering them"
    parts = [head] + [f"  {kind} at {line}" for kind, line, _ in accesses[:2]]
    if accesses:
        a = accesses[0][2]
        for start, (name, n) in shared.items():
            if start <= a < start + n:
                parts.append(f"  in __shared__ array '{name}' (a __syncthreads() between the two lines orders them)")
    return "\n".join(parts)


CRASH_ADVICE = ("\nlabkit: the program crashed (segmentation fault): a pointer outside any allocation, on the "
                "host or in a kernel; run it with the memory check (--check memory) to see where\n")


def _run_live(prog, args, env, timeout, cwd) -> tuple[int, str, str]:
    """The plain build run with this process's stdout and stderr (see run)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        rc = subprocess.run([prog.sources[0].stem, *map(str, args)], executable=str(prog.exe), env=env,
                            timeout=timeout, cwd=cwd).returncode
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"labkit: the program ran longer than {timeout:g} s and was stopped\n")
        return 124, "", ""
    if rc == -11:
        sys.stderr.write(CRASH_ADVICE)
    return rc, "", ""


def run(paths: list[str | os.PathLike], args: list[str] = (), *, check: str | None = None,
        timeout: float | None = None, cwd: str | os.PathLike | None = None,
        live: bool = False) -> tuple[int, str, str]:
    """Build and run a program: (exit status, stdout, stderr).  ``check``: one checking mode, or
    several separated by commas ('memory,race'): the program runs once in each build the modes
    need, and the first run that finds something is the one returned.  ``live`` (without a check):
    the program writes to this process's own stdout and stderr as it runs, in the order a native
    build's output would come (its assert lines between the lines around them), and the two
    strings returned are empty."""
    checks = [c.strip() for c in (check or "").replace("+", ",").split(",") if c.strip() and c.strip() != "none"]
    if checks == ["all"]:
        checks = list(PROGRAM_CHECKS)
    for c in checks:
        if c not in PROGRAM_CHECKS:
            raise ValueError(f"unknown check {c!r}: use any of {', '.join(PROGRAM_CHECKS)}, or 'all'")
    builds = [c for c in ("memory", "race", "shuffle") if c in checks] or [None]
    result = (0, "", "")
    for c in builds:
        prog = build(paths, check=c)
        env = dict(os.environ)
        env["LABKIT_CHECK"] = ",".join(checks)
        env["LABKIT_CPU_STACK_NEED"] = str(prog.stack_need)
        env["LABKIT_PROGRAM_DIR"] = str(prog.sources[0].resolve().parent)
        if c == "memory":
            env["ASAN_OPTIONS"] = ASAN_OPTIONS
        elif c == "race":
            env["TSAN_OPTIONS"] = TSAN_OPTIONS
            env.setdefault("LABKIT_CPU_WORKERS", "2")
        if live and c is None and len(checks) == 0:
            return _run_live(prog, args, env, timeout, cwd)
        try:
            # argv[0] is the program's name, as nvcc's build of it would be called (samples print it).
            proc = subprocess.run([prog.sources[0].stem, *map(str, args)], executable=str(prog.exe),
                                  capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd, errors="replace")
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            return 124, out, f"labkit: the program ran longer than {timeout:g} s and was stopped\n"
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
        if rc == -11:
            err += CRASH_ADVICE
        notes = ("LABKIT-ALLOC", "LABKIT-SHARED", "LABKIT-RACE-FIBERS")   # the runtime's notes for the reports
        shown = "".join(ln for ln in err.splitlines(keepends=True) if not ln.startswith(notes))
        if c == "memory" and "AddressSanitizer" in err:
            err = _explain_memory(err, prog.sources) + "\n\n--- AddressSanitizer report ---\n" + shown
        elif c == "race" and "ThreadSanitizer" in err:
            err = _explain_race(err, prog.sources) + "\n\n--- ThreadSanitizer report ---\n" + shown
        else:
            err = shown
        result = (rc, out, err)
        if rc != 0:
            return result
    return result
