"""The notebooks as stored: executed, no errors, and every check verdict they show is a pass.

nbval compares a re-run with the stored outputs, so a verdict stored as ``False`` would grade a
broken check as the expected answer.  These tests read the stored notebooks only (nbval itself
re-executes them: `make test`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labkit.course.series import notebooks as series_notebooks

NOTEBOOKS = series_notebooks(Path(__file__).resolve().parent.parent / "notebooks")
VERDICT = re.compile(r"^(?P<what>[^\n]*?): (?P<verdict>True|False)\s*$")


def code_cells(path: Path) -> list[dict]:
    nb = json.loads(path.read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


@pytest.mark.check
def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_from_a_full_run(path):
    for i, cell in enumerate(code_cells(path)):
        assert cell.get("execution_count") is not None, f"{path.name}: code cell {i} was never executed"
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{path.name}: code cell {i} stored an error: {errors[0].get('ename')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_stored_verdict_is_a_pass(path):
    verdicts = 0
    for i, cell in enumerate(code_cells(path)):
        for out in cell.get("outputs", []):
            if out.get("output_type") != "stream" or out.get("name") != "stdout":
                continue
            for line in "".join(out.get("text", "")).splitlines():
                m = VERDICT.match(line)
                if m:
                    verdicts += 1
                    assert m["verdict"] == "True", f"{path.name}, code cell {i}: stored verdict {line!r}"
    assert verdicts > 0, f"{path.name} shows no check verdict ('...: True')"


MACHINE_PATH = re.compile(r"PosixPath\(|(?<![\w.])/(?:home|root|tmp|work|Users)/")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_show_no_stderr_and_no_machine_paths(path):
    """A student reads the stored outputs: no red stderr box (a framework's start-up log, a progress
    bar's warning) and no path of the machine the notebook ran on."""
    for i, cell in enumerate(code_cells(path)):
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr", f"{path.name}, code cell {i}: stderr {''.join(out['text'])[:200]!r}"
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            m = MACHINE_PATH.search(text)
            assert m is None, f"{path.name}, code cell {i}: a machine's path in {text[max(0, m.start() - 60):m.end() + 60]!r}"


def installed_kernel() -> dict:
    """The kernel `make lab` runs, as the Makefile installs it (`ipykernel install --name NAME`, and
    `--display-name` where given, else ipykernel's own default)."""
    from ipykernel.kernelspec import get_kernel_dict
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    line = next(line for line in makefile.splitlines() if "ipykernel install" in line)
    name = re.search(r"--name[ =](\S+)", line)
    shown = re.search(r"--display-name[ =](\"[^\"]*\"|'[^']*'|\S+)", line)
    return {"name": name[1] if name else "python3",
            "display_name": shown[1].strip("\"'") if shown else get_kernel_dict()["display_name"],
            "language": "python"}


@pytest.mark.check
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_kernelspec_is_the_installed_kernel(path):
    """JupyterLab writes the running kernel's spec into a notebook's metadata when it opens it: a stored
    spec that differs (a display name "Python 3" against ipykernel's "Python 3 (ipykernel)") marks every
    notebook modified the moment it opens."""
    spec = json.loads(path.read_text())["metadata"]["kernelspec"]
    assert spec == installed_kernel(), f"{path.name}: stored kernelspec {spec}, `make lab` runs {installed_kernel()}"


@pytest.mark.check
def test_an_appendix_follows_its_notebook_and_is_chosen_by_its_number():
    """02b (an appendix to 02) runs right after 02; `--only 02` runs 02 alone, `--only 02b` the appendix."""
    from labkit.course.series import chosen, number
    names = [p.name for p in NOTEBOOKS]
    assert names.index("02b_host_code.ipynb") == names.index("02_naive_gpu_convolution.ipynb") + 1
    two, appendix = (next(p for p in NOTEBOOKS if p.name.startswith(n)) for n in ("02_", "02b_"))
    assert (number(two), number(appendix)) == ("02", "02b")
    assert chosen(two, ["02"]) and not chosen(appendix, ["02"]) and chosen(appendix, ["02b"])
    assert chosen(two, ["02_naive"]) and not chosen(two, ["02b"]) and chosen(appendix, None)
