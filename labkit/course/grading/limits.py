"""Run a grading child process with a time limit and a memory limit, and end all of it on time.

The child gets a session of its own, so the compiler, the sanitizer runners and anything else it
starts are ended with it.  Memory is watched from outside: the resident memory of every process of
the session, read from /proc a few times a second; past the limit the session is killed.  (An
address-space rlimit would not do: the CPU executor's memory and race checks run under AddressSanitizer
and ThreadSanitizer, which reserve terabytes of address space they never touch, and so does CUDA.)
Without /proc (not Linux) only the time limit holds.
"""
from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Finished", "run_limited", "session_rss_bytes", "DEFAULT_MEMORY_GIB"]

DEFAULT_MEMORY_GIB = 6.0
_POLL_S = 0.2
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Finished:
    returncode: int | None      # None: ended by a limit
    stdout: str
    stderr: str
    limit: str | None = None    # "time" or "memory": which limit ended it

    @property
    def timed_out(self) -> bool:
        return self.limit == "time"


def session_rss_bytes(sid: int) -> int | None:
    """Resident memory of every process in session ``sid`` (None: no /proc to read)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    total = 0
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid:              # fields after the command: state ppid pgrp session ...
                total += int((d / "statm").read_text().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            continue
    return total


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_limited(cmd: list[str], *, timeout: float, memory_gib: float | None = None, env: dict | None = None,
                cwd=None) -> Finished:
    """Run ``cmd`` in a session of its own; end the session at ``timeout`` seconds or when its
    resident memory passes ``memory_gib`` GiB (None or 0: no memory limit)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                         start_new_session=True)
    cap = int(memory_gib * (1 << 30)) if memory_gib else None
    waited, limit = 0.0, None
    while True:
        try:
            out, err = p.communicate(timeout=_POLL_S if cap else timeout)
            return Finished(p.returncode, out, err)
        except subprocess.TimeoutExpired:
            waited += _POLL_S if cap else timeout
        if waited >= timeout:
            limit = "time"
        elif cap is not None:
            rss = session_rss_bytes(p.pid)
            if rss is not None and rss > cap:
                limit = "memory"
        if limit:
            _kill(p)
            out, err = p.communicate()
            return Finished(None, out, err, limit)
