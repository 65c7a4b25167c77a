"""A sandbox for everything a student wrote, made with bubblewrap (``bwrap``, from the OS packages).

    if (why := sandbox.unavailable()) is None:
        done = sandbox.run(["python", "-m", "labkit.course.kernel_runner", "/job"], jobs={"/job": job_dir},
                           limits=sandbox.Limits(seconds=120))
        done.result          # the bytes it wrote to the result pipe (at most limits.result_bytes)

What the program inside sees and may do:

* no network (a network namespace of its own, with loopback only), its own PID namespace (it and
  every process it starts end with the run: a double fork or a ``setsid`` daemon does not outlive
  it), its own IPC and UTS namespaces;
* a clean environment: only the variables the grader names;
* the system (``/usr``, ``/etc``), Python, the grader's import path (less the folder the grader was
  started in) and labkit (the package alone, at ``LABKIT_MOUNT``), read-only; the folders the grader
  names (``jobs``: the student's files, the check's inputs, and for a notebook's cells the data and
  shipped results they read, ``repository_files()``), read-only; nothing else of the host (not the
  instructor's notebooks or solutions, not other students' files, not the grader's results);
* a private ``/tmp`` and ``/dev/shm`` (tmpfs, ``Limits.scratch_mib``), gone with the run: the compile
  cache of the kernels it builds lives there, so nothing it compiles reaches a later run;
* limits on the size of any file it writes, on processes, open files and CPU time (rlimits), on wall
  time and on the resident memory of all its processes together (watched from outside: the CPU
  executor's memory and race checks reserve terabytes of address space they never touch);
* a user of its own when the grader runs as root (so the process limit holds: root is exempt).

What it hands back is bytes on a pipe (the file descriptor ``$LABKIT_RESULT_FD``, ``result_fd()``
inside), read by the grader up to ``Limits.result_bytes`` and parsed there as plain data: nothing
the sandboxed program writes is a verdict.
"""
from __future__ import annotations

import functools
import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "Finished", "unavailable", "run", "readable_roots", "repository_files", "result_fd", "write_result",
           "write_all", "RESULT_FD_ENV"]

RESULT_FD_ENV = "LABKIT_RESULT_FD"

# Users that sandboxed runs take when the grader is root: one per run at a time, so that the process
# limit of one student's run is not shared with another's.
_UIDS = itertools.cycle(range(61000, 62000))
_POLL_S = 0.1
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Limits:
    """What a sandboxed run may use: wall ``seconds``, ``cpu_seconds`` of CPU time (each process),
    ``memory_gib`` of resident memory (all its processes together), ``file_mib`` for any one file it
    writes, ``processes`` alive at once, ``open_files``, ``scratch_mib`` for /tmp and /dev/shm each,
    and ``result_bytes`` for what it hands back on the result pipe."""
    seconds: float = 120.0
    cpu_seconds: int = 600
    memory_gib: float = 4.0
    file_mib: int = 256
    processes: int = 128
    open_files: int = 1024
    scratch_mib: int = 1024
    result_bytes: int = 256 << 20


@dataclass
class Finished:
    """How a sandboxed run ended: ``returncode`` (None when a limit ended it, then ``limit`` says
    which: "time" or "memory"), what it printed (the last 64 KiB of each stream), and ``result``,
    the bytes it wrote to the result pipe (None when it wrote more than the limit: ``limit`` is then
    "result")."""
    returncode: int | None
    stdout: str
    stderr: str
    result: bytes | None
    limit: str | None = None


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None where a sandbox can be made here, else why not (no bwrap, or one that cannot start)."""
    if not sys.platform.startswith("linux"):
        return "the grader's sandbox needs Linux (bubblewrap)"
    if shutil.which("bwrap") is None:
        return ("bubblewrap (bwrap) is not installed: install it from the OS packages (Debian/Ubuntu: "
                "apt-get install bubblewrap; Fedora: dnf install bubblewrap)")
    try:
        done = subprocess.run(_bwrap_argv(["/bin/true"], jobs={}, env={}, limits=Limits(), uid=next(_UIDS)),
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot start a sandbox here ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        return f"bubblewrap cannot start a sandbox here: {done.stderr.strip()[-500:]}"
    return None


LABKIT_MOUNT = "/opt/labkit-sandbox"        # where the labkit package is seen inside (it alone, not its repository)


def _started_in() -> set[Path]:
    """The folders Python put first on the import path because the grader was started there: the
    working folder (``python -m``, ``python -c``) and the main script's folder.  They hold whatever the
    instructor keeps there (a home folder, the submissions, the course's solutions), never a package the
    sandbox needs; a folder also named in ``$PYTHONPATH`` is kept."""
    named = {Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    here = {Path.cwd().resolve()}
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        here.add(Path(main).resolve().parent)
    return here - named


def _python_paths() -> list[Path]:
    """The grader's own import path (its venv, packages installed elsewhere), less anything of the
    repository labkit lives in (the instructor's notebooks hold the solutions) and less the folder the
    grader was started in."""
    import labkit
    package = Path(labkit.__file__).resolve().parent
    repo = package.parent
    started = _started_in()
    out = []
    for entry in sys.path:
        if not entry:
            continue                     # the working folder: wherever the grader was started
        p = Path(entry).resolve()
        if not p.is_dir() or p == repo or p in repo.parents or repo in p.parents or p in started:
            continue
        out.append(p)
    return list(dict.fromkeys(out))


def repository_files() -> dict[str, Path]:
    """{path inside: folder outside} for the repository's folders that labkit and the notebooks read
    (labkit.results.READ_ONLY_DIRS: ``data/``, ``benchmarks/results/``), each where labkit computes it
    inside the sandbox: there the repository's root is LABKIT_MOUNT.  A ``jobs`` argument for ``run``
    (bound read-only, as every job is); a folder missing here (labkit installed without its
    repository) is left out."""
    from ..results import READ_ONLY_DIRS, REPO_ROOT
    return {f"{LABKIT_MOUNT}/{d.relative_to(REPO_ROOT).as_posix()}": d for d in READ_ONLY_DIRS if d.is_dir()}


def readable_roots() -> list[Path]:
    """What a sandboxed Python needs to read besides the system: the interpreter's installation, the
    environment it runs in (a venv) and the grader's import path, all read-only (labkit itself is
    bound apart, at LABKIT_MOUNT)."""
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(sys.executable).resolve().parent,
             *_python_paths()}
    return sorted(r for r in roots if not any(r != o and o in r.parents for o in roots))


def _system_binds() -> list[str]:
    argv = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        p = Path(top)
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            argv += ["--ro-bind", top, top]
    return argv


def _mount_points(paths) -> list[str]:
    """Folders a bind needs above it, made traversable (0755): bwrap makes them as the host has them,
    and a host's 0700 home would hide a Python installed there from the sandbox's user."""
    argv, made = [], set()
    covered = {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/dev", "/proc"}
    for p in paths:
        for parent in reversed(Path(p).parents):
            s = str(parent)
            if s == "/" or s in made or any(s == c or s.startswith(c + "/") for c in covered):
                continue
            made.add(s)
            argv += ["--perms", "0755", "--dir", s]
    return argv


def _bwrap_argv(cmd: list[str], *, jobs: dict, env: dict, limits: Limits, uid: int | None) -> list[str]:
    roots = [str(r) for r in readable_roots()]
    argv = ["bwrap", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        # As root, bwrap makes the namespaces itself, then the program drops to a user of its own
        # (setpriv, below): the process limit does not hold for root.
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-all", "--cap-drop", "ALL"]
    argv += _system_binds()
    # The private /tmp first: a folder of the import path that lies under the host's /tmp is then bound
    # into it, instead of being hidden by it.
    size = str(limits.scratch_mib << 20)
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    argv += _mount_points(roots + list(jobs) + [LABKIT_MOUNT + "/labkit"])
    for r in roots:
        argv += ["--ro-bind", r, r]
    import labkit
    argv += ["--ro-bind", str(Path(labkit.__file__).resolve().parent), f"{LABKIT_MOUNT}/labkit"]
    for inside, outside in jobs.items():
        argv += ["--ro-bind", str(outside), inside]
    # The root bwrap builds is a tmpfs of its own; without root, the user who starts the sandbox owns it
    # and the folders made above: read-only, so that /tmp and /dev/shm (mounts of their own, sized) are
    # the only places a student's code writes.
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", "/tmp", "--clearenv"]
    path = os.pathsep.join([LABKIT_MOUNT] + [str(p) for p in _python_paths()])
    for k, v in {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONPATH": path,
                 **env}.items():
        argv += ["--setenv", k, str(v)]
    argv.append("--")
    if os.geteuid() == 0:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--"]
    return argv + list(cmd)


def result_fd() -> int:
    """Inside a sandboxed run: the file descriptor of the result pipe."""
    return int(os.environ[RESULT_FD_ENV])


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a pipe takes it in pieces)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_result(data: bytes) -> None:
    """Inside a sandboxed run: hand ``data`` back on the result pipe, and close it."""
    fd = result_fd()
    write_all(fd, data)
    os.close(fd)


def _own_processes() -> int:
    me = os.getuid()
    n = 0
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                n += d.stat().st_uid == me
            except OSError:
                pass
    return n


def _set_limits(limits: Limits, processes: int) -> None:
    """In the child, before bwrap: the rlimits the sandbox inherits (the process limit counts the
    real user's processes: a user of its own as root, else the grader's, hence ``processes``)."""
    mib = 1 << 20
    for what, value in ((resource.RLIMIT_FSIZE, limits.file_mib * mib), (resource.RLIMIT_NPROC, processes),
                        (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_CPU, limits.cpu_seconds),
                        (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(what, (value, value))


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _sandbox_rss(outer: int, ns: list) -> int:
    """Resident bytes of every process in the sandbox's PID namespace (found once, from the child
    bwrap forks into it): a setsid() inside cannot leave it, as it could leave a session."""
    proc = Path("/proc")
    if not ns:
        here = _pid_namespace(os.getpid())
        for d in proc.iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                    if int(stat[stat.rindex(")") + 2:].split()[1]) == outer:
                        inner = _pid_namespace(int(d.name))
                        if inner and inner != here:
                            ns.append(inner)
                            break
                except (OSError, ValueError, IndexError):
                    continue
        if not ns:
            return 0
    total = 0
    for d in proc.iterdir():
        if d.name.isdigit() and _pid_namespace(int(d.name)) == ns[0]:
            try:
                total += int((d / "statm").read_text().split()[1]) * _PAGE
            except (OSError, ValueError, IndexError):
                continue
    return total


def _drain(stream, keep: int, sink: list) -> None:
    """Read ``stream`` to its end, keeping the last ``keep`` bytes (a program that prints gigabytes
    costs the grader no memory)."""
    buf = bytearray()
    while True:
        chunk = stream.read(1 << 16)
        if not chunk:
            break
        buf += chunk
        if len(buf) > 2 * keep:
            del buf[:-keep]
    sink.append(bytes(buf[-keep:]))


def _read_result(fd: int, cap: int, sink: list) -> None:
    """Read fd up to ``cap`` bytes; past it, stop keeping (None) but go on reading, so the writer is
    not blocked and the run ends on its own terms."""
    buf, over = bytearray(), False
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            chunk = f.read(1 << 16)
            if not chunk:
                break
            if not over:
                buf += chunk
                if len(buf) > cap:
                    over, buf = True, bytearray()
    sink.append(None if over else bytes(buf))


def run(cmd: list[str], *, jobs: dict | None = None, env: dict | None = None, limits: Limits = Limits(),
        fds: dict | None = None) -> Finished:
    """Run ``cmd`` in a sandbox: ``jobs`` {path inside: folder or file outside} bound read-only,
    ``env`` the only environment variables besides PATH, HOME and TMPDIR, ``fds`` {variable: file
    descriptor} pipes it inherits (their numbers in those variables; this process's copies are
    closed once the sandbox has them).  Ends it all at the wall time or
    the memory limit."""
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    uid = next(_UIDS) if os.geteuid() == 0 else None
    processes = limits.processes if uid is not None else _own_processes() + limits.processes
    read_end, write_end = os.pipe()
    fds = dict(fds or {})
    argv = _bwrap_argv(cmd, jobs=jobs or {}, env={**(env or {}), **fds, RESULT_FD_ENV: write_end}, limits=limits,
                       uid=uid)
    try:
        # bwrap leaves inherited descriptors open: the program inside writes its result there.
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, pass_fds=(write_end, *fds.values()),
                             preexec_fn=lambda: _set_limits(limits, processes))
    finally:
        os.close(write_end)
        for fd in fds.values():
            os.close(fd)            # the child's now: the other side sees the pipe end when the child does
    out, err, result = [], [], []
    readers = [threading.Thread(target=_drain, args=(p.stdout, 1 << 16, out), daemon=True),
               threading.Thread(target=_drain, args=(p.stderr, 1 << 16, err), daemon=True),
               threading.Thread(target=_read_result, args=(read_end, limits.result_bytes, result), daemon=True)]
    for t in readers:
        t.start()
    cap, ns, limit = int(limits.memory_gib * (1 << 30)), [], None
    start = time.monotonic()
    while p.poll() is None:
        if time.monotonic() - start > limits.seconds:
            limit = "time"
        elif _sandbox_rss(p.pid, ns) > cap:
            limit = "memory"
        if limit:
            try:
                os.killpg(p.pid, signal.SIGKILL)     # bwrap; its child dies with it, and the namespace
            except ProcessLookupError:
                pass
            break
        time.sleep(_POLL_S)
    p.wait()
    for t in readers:
        t.join(timeout=10)
    text = lambda parts: (parts[0] if parts else b"").decode(errors="replace")  # noqa: E731
    got = result[0] if result else b""
    if got is None and limit is None:
        limit = "result"
    return Finished(None if limit else p.returncode, text(out), text(err), got, limit)
