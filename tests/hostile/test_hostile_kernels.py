"""Kernels that would hang or crash the notebook: an endless loop, a spin-wait on another warp, a
recursion that overflows its stack, Ctrl-C during a launch.  On the CPU executor each becomes a
clear error (or a KeyboardInterrupt) within the watchdog's limit, and the module runs again after."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from labkit.backends.cpu import CPUModule
from labkit.errors import LaunchError

CODE = r'''
extern "C" __global__ void endless(int* flag) {
  while (flag[0] == 0) { }                       // nothing ever sets it
}
extern "C" __global__ void spin_on_other_warp(volatile int* flag, int* out) {
  if (threadIdx.x >= 32) { flag[0] = 1; return; }          // warp 1 sets the flag ...
  while (flag[0] == 0) { }                                  // ... warp 0 waits for it, never yielding
  out[threadIdx.x] = 1;
}
__device__ int deep(int n, volatile char* up) {
  volatile char pad[512];                         // its address goes down the recursion: a real frame each call
  pad[0] = char(n);
  if (n == 0) return up[0];
  return deep(n - 1, pad) + pad[0];
}
extern "C" __global__ void recurse(int* out, int n) { volatile char top[1] = {0}; out[threadIdx.x] = deep(n, top); }
extern "C" __global__ void big_locals(float* out) {
  float a[40000];                                 // 160 KB of locals per thread: legal on a GPU
  for (int i = 0; i < 40000; ++i) a[i] = float(i + threadIdx.x);
  float s = 0.0f;
  for (int i = 0; i < 40000; i += 1000) s += a[i];
  out[threadIdx.x] = s;
}
extern "C" __global__ void fine(int* out) { out[threadIdx.x] = threadIdx.x; }
'''


@pytest.fixture(scope="module")
def mod():
    return CPUModule(CODE, path="hostile.cu")


def still_runs(mod, check=None):
    out = np.zeros(32, np.int32)
    mod.get_function("fine")((1,), (32,), (out,), check=check)
    assert np.array_equal(out, np.arange(32))


@pytest.mark.parametrize("check", [None, "memory"])
def test_an_endless_loop_is_stopped_by_the_watchdog(mod, monkeypatch, check):
    monkeypatch.setenv("LABKIT_CPU_TIMEOUT_S", "1")
    t = time.perf_counter()
    with pytest.raises(LaunchError, match=r"watchdog: kernel 'endless' ran longer than 1 s.*endless loop"):
        mod.get_function("endless")((2,), (64,), (np.zeros(1, np.int32),), check=check)
    assert time.perf_counter() - t < 30
    still_runs(mod, check)


def test_a_spin_wait_on_another_warp_is_stopped(mod, monkeypatch):
    monkeypatch.setenv("LABKIT_CPU_TIMEOUT_S", "1")
    with pytest.raises(LaunchError, match=r"watchdog: kernel 'spin_on_other_warp'.*a flag that another block or warp"):
        mod.get_function("spin_on_other_warp")((1,), (64,), (np.zeros(1, np.int32), np.zeros(64, np.int32)))
    still_runs(mod)


def test_ctrl_c_interrupts_a_launch(mod, monkeypatch):
    monkeypatch.setenv("LABKIT_CPU_TIMEOUT_S", "60")
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            mod.get_function("endless")((4,), (64,), (np.zeros(1, np.int32),))
    finally:
        timer.cancel()
    assert time.perf_counter() - t < 20
    still_runs(mod)


@pytest.mark.check
def test_a_stack_overflow_is_an_error_not_a_crash(mod):
    with pytest.raises(LaunchError, match=r"stack overflow in kernel 'recurse', block \(0,0,0\), thread.*"
                                          r"LABKIT_CPU_STACK_KIB"):
        mod.get_function("recurse")((1,), (4,), (np.zeros(4, np.int32), np.int32(1_000_000)))
    still_runs(mod)


def test_large_locals_get_the_stack_the_compiler_says_they_need(mod):
    assert mod.stack_need >= 160_000
    out = np.zeros(8, np.float32)
    mod.get_function("big_locals")((1,), (8,), (out,))
    want = [sum(float(i + t) for i in range(0, 40000, 1000)) for t in range(8)]
    assert np.allclose(out, want)


@pytest.mark.check
def test_a_bad_timeout_setting_names_the_variable(mod, monkeypatch):
    monkeypatch.setenv("LABKIT_CPU_TIMEOUT_S", "soon")
    with pytest.raises(LaunchError, match=r"LABKIT_CPU_TIMEOUT_S='soon': must be a number of seconds"):
        still_runs(mod)


def test_locals_too_large_for_the_machine_are_refused_before_launch():
    huge = CPUModule(r'''
extern "C" __global__ void huge_locals(float* out) {
  float a[1 << 28];                              // 1 GiB of locals per thread, 1024 threads
  for (int i = 0; i < (1 << 28); i += 4096) a[i] = float(i);
  out[threadIdx.x] = a[4096 * threadIdx.x];
}''', path="huge.cu")
    out = np.zeros(1024, np.float32)
    with pytest.raises(LaunchError, match=r"kernel 'huge_locals': 1024 threads x \d+ KiB of stack each.*"
                                          r"more than half this machine's memory"):
        huge.get_function("huge_locals")((1,), (1024,), (out,))


def test_large_stacks_run_on_fewer_workers(monkeypatch):
    from labkit.backends.cpu import module
    monkeypatch.setattr(module, "stack_budget", lambda: 10 * 1024 * 256 * 1024)
    assert module.workers_for(256 * 1024, 1024, 0, "k") == (0 if (os.cpu_count() or 1) <= 10 else 10)
    assert module.workers_for(256 * 1024, 1024, 64, "k") == 10
    assert module.workers_for(128 * 1024, 32, 3, "k") == 3


def test_a_killed_memory_check_leaves_no_files_and_no_runner(tmp_path):
    """The notebook's kernel killed during a checked launch (a restart): no /tmp folder stays behind,
    and the runner process ends with it instead of spinning on alone."""
    import subprocess
    import sys
    # A /tmp of its own: the folders other tests make in the shared one while this runs are not its own.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    script = tmp_path / "launch.py"
    script.write_text(
        "import numpy as np\n"
        "from labkit.backends.cpu import CPUModule\n"
        f"mod = CPUModule({CODE!r}, path='hostile.cu')\n"
        "print('launching', flush=True)\n"
        "mod.get_function('endless')((1,), (32,), (np.zeros(1, np.int32),), check='memory')\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LABKIT_CPU_TIMEOUT_S": "600", "TMPDIR": str(private_tmp)})
    assert proc.stdout.readline().strip() == "launching"
    deadline = time.time() + 300                     # the first checked launch compiles the runner
    runners = []
    while not runners and time.time() < deadline and proc.poll() is None:
        runners = [p for p in _children(proc.pid) if "runner-" in _cmdline(p)]
        time.sleep(0.2)
    assert runners, "the memory check's runner should be running"
    time.sleep(0.5)                                  # spinning in the kernel now
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in runners):
        time.sleep(0.1)
    assert not any(_alive(p) for p in runners)
    left = {n for n in os.listdir(private_tmp) if n.startswith("labkit")}
    assert not left


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pytest.skip("needs /proc (Linux) to find the runner process")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
