"""The JupyterLab extension that opens the .cu exercises with C++ highlighting (lab/cuda-language/):
its committed build is the source's, `make lab` puts it on JUPYTER_PATH, and JupyterLab finds it there
enabled.  tests/test_browser_lab.py sees the highlighting itself, in a browser."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import lab_recipe

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "lab" / "cuda-language"
NAME = json.loads((SOURCE / "package.json").read_text())["name"]


def make_lab_jupyter_path() -> str:
    """The JUPYTER_PATH the `lab` recipe sets, as `make -n lab` shows it."""
    env, _ = lab_recipe()
    assert "JUPYTER_PATH" in env, f"the lab recipe sets no JUPYTER_PATH: {env}"
    return env["JUPYTER_PATH"]


def test_make_lab_puts_the_built_extension_on_jupyter_path():
    built = [Path(p) / "labextensions" / NAME for p in make_lab_jupyter_path().split(os.pathsep)]
    assert any((b / "package.json").is_file() for b in built), f"no {NAME} under {built}"


def test_the_committed_build_is_the_sources():
    built = REPO / "lab" / "share" / "jupyter" / "labextensions" / NAME
    meta = json.loads((built / "package.json").read_text())
    source = json.loads((SOURCE / "package.json").read_text())
    assert (meta["name"], meta["version"]) == (source["name"], source["version"])
    assert (built / meta["jupyterlab"]["_build"]["load"]).is_file()
    assert meta["jupyterlab"]["sharedPackages"]["@jupyterlab/codemirror"] == {"bundled": False, "singleton": True}
    code = "".join(p.read_text() for p in (built / "static").glob("*.js"))
    src = (SOURCE / "src" / "index.js").read_text()
    for literal in re.findall(r"'([^']+)'", re.sub(r"^\s*//.*$", "", src, flags=re.M)):
        if literal != "@jupyterlab/codemirror":        # resolved to the shared module, not kept by name
            assert literal in code, f"{literal!r} of src/index.js is not in the build: rebuild it (src/index.js says how)"


def test_jupyterlab_finds_it_enabled():
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        pytest.skip(f"no jupyter beside {sys.executable}: install the lab extras (pip install -e '.[lab]')")
    env = dict(os.environ, JUPYTER_PATH=make_lab_jupyter_path())
    out = subprocess.run([str(jupyter), "labextension", "list"], env=env, capture_output=True, text=True, timeout=120)
    listed = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert re.search(rf"{NAME} v[\d.]+ enabled\s+OK", listed), listed
