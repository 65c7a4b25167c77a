"""Execute the whole lab series headless: `python -m labkit.course.series --out results`.

Every notebook in notebooks/ runs in order on the backend labkit picks (the GPU,
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


def notebooks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))


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
        if only and not any(nb_path.name.startswith(o) for o in only):
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
    ap.add_argument("--only", nargs="*", help="notebook number prefixes to run, e.g. 00 02")
    args = ap.parse_args(argv)
    return run(Path(args.out), args.only)


if __name__ == "__main__":
    sys.exit(main())
