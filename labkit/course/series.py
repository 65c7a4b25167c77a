"""Execute the whole lab series headless: `python -m labkit.course.series --out results`.

Every notebook in notebooks/ (00-13, and the appendix 02b) runs in order on the backend labkit picks (the GPU,
or the CPU executor), with LABKIT_RESULTS_DIR pointing at the output folder, so
the timing tables (JSON) and batch-size plots (PNG) the notebooks save land
there beside the executed notebooks.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..results import REPO_ROOT as REPO


# The series' notebooks: a number (00-13), or a number and a letter for an appendix to that notebook
# (02b, after 02), then the name.
PATTERNS = ("[0-9][0-9]_*.ipynb", "[0-9][0-9][a-z]_*.ipynb")


def notebooks(folder: str | os.PathLike) -> list[Path]:
    """The series' notebooks in ``folder``, in order (an appendix right after its notebook)."""
    return sorted({p for pattern in PATTERNS for p in Path(folder).glob(pattern)}, key=lambda p: p.name)


def number(path: str | os.PathLike) -> str:
    """A notebook's number: "02" for 02_naive_gpu_convolution.ipynb, "02b" for 02b_host_code.ipynb."""
    return Path(path).name.split("_", 1)[0]


def chosen(path: Path, only: list[str] | None) -> bool:
    """Whether ``--only`` names the notebook: by its number ("02" is not "02b") or a longer prefix of its name."""
    if not only:
        return True
    return any(o == number(path) or (len(o) > len(number(path)) and path.name.startswith(o)) for o in only)


def run(out: Path, only: list[str] | None = None, timeout: int = 1800) -> int:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    out = out.resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    os.environ["LABKIT_RESULTS_DIR"] = str(out)
    import labkit
    dev = labkit.device()
    print(f"labkit {labkit.__version__}: backend {dev.backend}, device {dev.name}")
    failures = 0
    for nb_path in notebooks(REPO / "notebooks"):
        if not chosen(nb_path, only):
            continue
        nb = nbformat.read(nb_path, as_version=4)
        t0 = time.perf_counter()
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(nb_path.parent)}})
        status = "ok"
        try:
            client.execute()
        except CellExecutionError as exc:
            status = "FAILED"
            failures += 1
            print(str(exc)[-3000:], file=sys.stderr)
        nbformat.write(nb, out / "notebooks" / nb_path.name)
        print(f"  {nb_path.name:48s} {status:6s} {time.perf_counter() - t0:7.1f} s")
    print(f"executed notebooks, plots (PNG) and tables (JSON) are in {out}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "results"), help="output folder (default: results/)")
    ap.add_argument("--only", nargs="*", help="notebook numbers to run, e.g. 00 02 02b")
    args = ap.parse_args(argv)
    return run(Path(args.out), args.only)


if __name__ == "__main__":
    sys.exit(main())
