"""The grader's Slurm array job on a real Slurm: a single-node cluster (munged, slurmctld, slurmd from
the OS packages, as .ci/run installs them) started in a temporary folder, the synthetic students
graded as array tasks and merged, the gradebook the same as a local run's with the same seed.
Skipped, saying why, where the daemons are not installed or cannot start."""
from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from labkit.course import grade
from labkit.course.grade import EXERCISES, INSTRUCTOR_NOTEBOOKS, grade_folder, instructor_exercises
from labkit.course.grading import synthetic

DAEMONS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")
missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
pytestmark = [
    pytest.mark.skipif(bool(missing), reason=f"Slurm is not installed here (no {', '.join(missing)}): "
                                             "apt-get install slurmd slurmctld slurm-client munge"),
    pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0,
                       reason="starting slurmd (which runs jobs as their users) needs root"),
]


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    for d in ("state", "spool", "log", "munge"):
        (root / d).mkdir()
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge" / "sock"
    host = socket.gethostname()
    mem_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=labkit-test", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SchedulerType=sched/backfill", "MpiDefault=none", "ReturnToService=2",
        "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 2} RealMemory={int(mem_mib * 0.9)} State=UNKNOWN",
        f"PartitionName=grading Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    try:
        subprocess.run([_tool("munged"), "--force", f"--socket={sock}", f"--key-file={key}",
                        f"--pid-file={root}/munge/pid", f"--log-file={root}/munge/log",
                        f"--seed-file={root}/munge/seed"], check=True, capture_output=True, timeout=30)
        started.append(("munged", root / "munge" / "pid"))
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([_tool(daemon), "-f", str(conf)], check=True, capture_output=True, env=env, timeout=30)
            started.append((daemon, root / f"{daemon}.pid"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run([_tool("sinfo"), "-h", "-o", "%t"], capture_output=True, text=True, env=env)
            if state.stdout.strip() == "idle":
                break
            time.sleep(1)
        else:
            pytest.skip(f"the single-node Slurm did not come up: sinfo says {state.stdout.strip() or state.stderr.strip()}")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        _stop(started)
        pytest.skip(f"the single-node Slurm could not start here: {exc}")
    yield env
    subprocess.run([_tool("scontrol"), "shutdown"], capture_output=True, env=env, timeout=30)
    _stop(started)


def _stop(started) -> None:
    for _, pid_file in reversed(started):
        try:
            os.kill(int(pid_file.read_text().split()[0]), 15)
        except (OSError, ValueError, IndexError):
            pass


def _csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_the_array_job_on_a_real_slurm_grades_as_a_local_run(cluster, tmp_path):
    python_points = {e.grade_id: e.points for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex}
    synthetic.write_synthetic(tmp_path, INSTRUCTOR_NOTEBOOKS, EXERCISES, python_points,
                              students=["correct", "wrong_index", "unattempted"])
    names = ["02_conv_naive", "05_count_loads_and_fmas"]
    options = ["--exercises", *names, "--timeout", "60", "--notebook-timeout", "60", "--seed", "11"]
    assert grade.main([str(tmp_path / "submissions"), "--slurm", "--out", str(tmp_path / "grades"), *options]) == 0
    slurm = tmp_path / "grades" / "slurm"
    done = subprocess.run(["sh", str(slurm / "submit.sh")], capture_output=True, text=True, env=cluster, timeout=60)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 600
    while not (tmp_path / "grades" / "gradebook.csv").exists() and time.monotonic() < deadline:
        time.sleep(2)
    logs = "\n".join(p.read_text()[-1000:] for p in sorted(slurm.glob("*.log")))
    assert (tmp_path / "grades" / "gradebook.csv").exists(), f"no merged gradebook after 10 minutes:\n{logs}"
    assert len(list(slurm.glob("task-*.log"))) == 3                # three array tasks ran, one per student
    local = tmp_path / "local"
    grade_folder(tmp_path / "submissions", local, exercises=names, timeout=60, notebook_timeout=60, seed=11)
    merged_rows, local_rows = _csv(tmp_path / "grades" / "gradebook.csv"), _csv(local / "gradebook.csv")
    assert merged_rows == local_rows, (merged_rows, local_rows)
    worth = {"02_conv_naive": EXERCISES["02_conv_naive"].points, "05_count_loads_and_fmas": python_points["05_count_loads_and_fmas"]}
    points = {r[0]: int(r[3]) for r in merged_rows[1:]}
    assert points == {s: synthetic.expected_points(s, worth) for s in ("correct", "unattempted", "wrong_index")}
