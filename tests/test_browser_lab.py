"""What a student sees in JupyterLab, in a real browser: the lab started as `make lab` starts it, the
system's Chromium driven by Playwright, Run All on a notebook and on the student version of 02.

The server is the Makefile's `lab` recipe (as `make -n lab` shows it, so the two cannot drift apart) with
what a test adds: no browser of its own, 127.0.0.1, a free port, a token, and a settings folder of its
own.  The folder it serves is a copy (notebook 01; the student version of 02 made by
labkit.course.student_copy), so nothing the test runs or saves touches the repository's notebooks.
The kernel imports this checkout's labkit (PYTHONPATH) and writes its results to a folder of the test's.

Needs Chromium from the OS packages (Debian: `apt-get install chromium`; .ci/run installs it) and
Playwright for Python (the `lab` extras: `pip install -e '.[lab]'`); the browser is the system's,
never one Playwright downloads.  Without either the tests skip, saying what to install.  On a failure
a screenshot of the page is kept in test-artifacts/browser/ (ignored by git).
"""
from __future__ import annotations

import os
import platform
import re
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import lab_recipe

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts" / "browser"
NOTEBOOK = "01_cpu_reference_convolution.ipynb"     # the fastest notebook with a figure on the CPU executor
STUDENT = "02_naive_gpu_convolution.ipynb"
EXERCISE = "02_conv_naive.cu"
START_S, RUN_ALL_S = 60, 150


def chromium_path() -> str | None:
    """The system's Chromium (Debian's package `chromium`), or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why the browser tests cannot run here, saying what to install; None where they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return ("needs Playwright for Python: pip install playwright (in the lab extras: "
                "pip install -e '.[lab]'); the browser is the system's Chromium, never `playwright install`")
    if chromium_path() is None:
        return "needs Chromium from the OS packages: apt-get install chromium (Debian; .ci/run installs it)"
    return None


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_settings(folder: Path) -> None:
    """JupyterLab's user settings for the test: no autosave (a notebook saved behind the test's back
    would hide whether it was modified on open), every cell rendered (no windowing: the figures of
    cells below the fold are in the page)."""
    for plugin, text in {"docmanager-extension/plugin": '{"autosave": false}',
                         "notebook-extension/tracker": '{"windowingMode": "none"}'}.items():
        path = folder / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server serving a copy of notebook 01 and the student version of 02: its URL and
    token, and the folder it serves."""
    from labkit.course.student_copy import student_kernel, student_notebook

    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / NOTEBOOK, root / "notebooks" / NOTEBOOK)
    (root / "student").mkdir()
    student_notebook(REPO / "notebooks" / STUDENT, root / "student" / STUDENT)
    student_kernel(REPO / "notebooks" / "exercises" / EXERCISE, root / "student" / "exercises" / EXERCISE)
    write_settings(root / ".settings")
    token, port = secrets.token_hex(16), free_port()
    made, cmd = lab_recipe()
    env = dict(os.environ, **made, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               LABKIT_RESULTS_DIR=str(root / ".results"), JUPYTER_CONFIG_DIR=str(root / ".jupyter"),
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"))
    cmd += ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                          f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
                          f"--LabApp.user_settings_dir={root / '.settings'}",
                          f"--LabApp.workspaces_dir={root / '.workspaces'}"]
    if os.geteuid() == 0:               # CI runs as root, where Jupyter refuses to start without it
        cmd.append("--allow-root")
    log = (root / "server.log").open("w")
    server = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start ({' '.join(cmd)}):\n"
                                       + (root / "server.log").read_text()[-3000:])
                time.sleep(0.3)
        yield {"url": url, "token": token, "root": root}
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    """A fresh page 1400 px wide; if the test fails, a screenshot of it goes to test-artifacts/browser/."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    failures = request.session.testsfailed
    yield pg
    if request.session.testsfailed > failures:     # the call failed (reported before teardown)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


# --- the page, through JupyterLab's application object (expose_app_in_browser) ---

def doc(path: str) -> str:
    """A JavaScript expression: the open document widget of ``path`` (never "the current widget": a
    tab restored or focused meanwhile would change what that names)."""
    return (f"Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context && w.context.path === {path!r})")


def open_document(page, lab, path: str) -> None:
    """Open ``path`` in a workspace of its own (reset: no tab of an earlier test restored beside it)."""
    page.goto(f"{lab['url']}/lab/workspaces/{secrets.token_hex(4)}/tree/{path}?reset&token={lab['token']}")
    page.wait_for_function(f"() => window.jupyterapp && {doc(path)} && {doc(path)}.context.isReady",
                           timeout=START_S * 1000)


def activate(page, path: str) -> None:
    """Make ``path``'s tab the current one: JupyterLab's commands act on it."""
    page.evaluate(f"() => window.jupyterapp.shell.activateById({doc(path)}.id)")
    page.wait_for_function(f"() => window.jupyterapp.shell.currentWidget === {doc(path)}")


def kernel_idle(page, path: str) -> None:
    """Wait for ``path``'s kernel: started, idle, its info (language, version) received and written into
    the notebook's metadata (what could mark it modified), half a second given to that."""
    page.wait_for_function(f"() => {{ const s = {doc(path)}.sessionContext; "
                           "return s && s.session && s.session.kernel && s.session.kernel.status === 'idle'; }",
                           timeout=START_S * 1000)
    page.evaluate(f"async () => {{ await {doc(path)}.sessionContext.session.kernel.info; "
                  "await new Promise(r => setTimeout(r, 500)); }")


def dirty(page, path: str) -> bool:
    return page.evaluate(f"() => {doc(path)}.context.model.dirty")


def changed_on_open(page, path: str, stored: Path) -> list[str]:
    """What JupyterLab changed in the notebook it opened (and ran the kernel of), against the file:
    the metadata entries it rewrote ("kernelspec", "language_info.version", ...) and whether any cell
    differs.  JupyterLab writes the kernel's spec and language info into the metadata as it starts it:
    a difference there is what marks a notebook modified on open."""
    import json
    now = page.evaluate(f"() => {doc(path)}.context.model.toJSON()")
    was = json.loads(stored.read_text())
    changes = []
    for key in sorted(set(now["metadata"]) | set(was["metadata"])):
        a, b = now["metadata"].get(key), was["metadata"].get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            changes.append(key)
    if [c["source"] for c in now["cells"]] != ["".join(c["source"]) for c in was["cells"]]:
        changes.append("cells")
    return changes


def assert_unmodified_on_open(page, path: str, stored: Path) -> None:
    """The notebook just opened is not marked modified, or only because the kernel runs another Python
    than the stored run's (its version in language_info: nothing a notebook can store avoids that)."""
    if not dirty(page, path):
        return
    changes = changed_on_open(page, path, stored)
    stored_python = json_metadata(stored).get("language_info", {}).get("version")
    assert changes == ["language_info.version"] and stored_python != platform.python_version(), (
        f"{stored.name} shows as modified on open; JupyterLab changed {changes} (the stored kernelspec "
        f"{json_metadata(stored).get('kernelspec')}; `make lab` installs the kernel `python3`)")


def json_metadata(path: Path) -> dict:
    import json
    return json.loads(path.read_text())["metadata"]


def settled(path: str) -> str:
    """A JavaScript expression: no code cell of ``path`` queued or running, and its kernel idle."""
    return (f"{doc(path)}.content.widgets.every(c => c.model.type !== 'code' || c.model.executionState === 'idle')"
            f" && {doc(path)}.sessionContext.session.kernel.status === 'idle'")


QUIET_S = 3


def wait_quiet(page, path: str) -> None:
    """Wait until ``path`` has been settled (``settled``) for QUIET_S seconds on end.  JupyterLab marks
    the cells still queued idle at the first error of a Run All, though its kernel goes on to run them
    (a check cell tagged raises-exception does not stop it): only a kernel idle for a while says the
    queue is done.  Between two queued cells it is idle for milliseconds."""
    page.evaluate("() => { window.labkitBusyAt = Date.now(); }")
    page.wait_for_function(f"() => {{ const now = Date.now(); if (!({settled(path)})) {{ window.labkitBusyAt = now; "
                           f"return false; }} return now - window.labkitBusyAt > {QUIET_S * 1000}; }}",
                           timeout=RUN_ALL_S * 1000, polling=250)


def run_all(page, path: str) -> None:
    """Run > Run All Cells, then wait until every cell queued has run (``wait_quiet``)."""
    activate(page, path)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells').then(() => null, () => null)")
    wait_quiet(page, path)


def run_cell(page, path: str, index: int) -> None:
    """Select code cell ``index`` (counting code cells) and run it, as Shift+Enter does, then wait."""
    activate(page, path)
    page.evaluate(f"() => {{ const nb = {doc(path)}.content; const cells = nb.widgets.filter(c => c.model.type === 'code');"
                  f"nb.activeCellIndex = nb.widgets.indexOf(cells[{index}]); "
                  "return window.jupyterapp.commands.execute('notebook:run-cell').then(() => null, () => null); }")
    wait_quiet(page, path)


def code_cells(page, path: str) -> list[dict]:
    """Each code cell of ``path``: its source, execution count, tags, grade_id, outputs (nbformat)."""
    return page.evaluate(
        f"() => {doc(path)}.content.widgets.filter(c => c.model.type === 'code').map(c => ({{"
        "source: c.model.sharedModel.getSource(), count: c.model.executionCount,"
        "tags: c.model.getMetadata('tags') || [], grade_id: (c.model.getMetadata('nbgrader') || {}).grade_id || null,"
        "outputs: c.model.outputs.toJSON()}))")


def figures(page, path: str) -> list[dict]:
    """Every image an output of ``path`` shows: its natural size and whether it loaded."""
    return page.evaluate(f"() => Array.from({doc(path)}.node.querySelectorAll('.jp-OutputArea-output img'))"
                         ".map(i => ({w: i.naturalWidth, h: i.naturalHeight, done: i.complete}))")


def stderr_boxes(page, path: str) -> int:
    return page.evaluate(f"() => {doc(path)}.node.querySelectorAll("
                         "'.jp-OutputArea-output[data-mime-type=\"application/vnd.jupyter.stderr\"]').length")


def output_text(cell: dict) -> str:
    parts = []
    for o in cell["outputs"]:
        parts.append("".join(o.get("text", "")))
        parts.append("".join(o.get("data", {}).get("text/plain", "")))
        if o.get("output_type") == "error":      # what the page shows of an error: its traceback's lines
            parts.append(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.get("traceback", []))))
    return "\n".join(parts)


# --- the tests ---

def test_a_notebook_runs_all_in_the_browser(lab, page):
    """Notebook 01 opened and Run All: not modified on open, every cell run, no error, no stderr box,
    every figure rendered at a readable size."""
    path = f"notebooks/{NOTEBOOK}"
    open_document(page, lab, path)
    kernel_idle(page, path)
    assert_unmodified_on_open(page, path, lab["root"] / path)
    run_all(page, path)
    cells = code_cells(page, path)
    not_run = [i for i, c in enumerate(cells) if c["count"] is None and c["source"].strip()]
    assert not not_run, f"Run All stopped: code cells {not_run} never ran"
    errors = [(i, output_text(c)[-500:]) for i, c in enumerate(cells) if any(o["output_type"] == "error" for o in c["outputs"])]
    assert not errors, f"error outputs: {errors}"
    stderr = [(i, output_text(c)[-300:]) for i, c in enumerate(cells)
              if any(o.get("name") == "stderr" for o in c["outputs"])]
    assert not stderr and stderr_boxes(page, path) == 0, f"stderr boxes: {stderr}"
    figs = figures(page, path)
    stored = sum(1 for c in cells for o in c["outputs"] if "image/png" in o.get("data", {}))
    assert stored >= 1 and len(figs) == stored, f"{len(figs)} images in the page for {stored} figures in the outputs"
    for f in figs:
        assert f["done"] and 300 <= f["w"] <= 2000 and f["h"] >= 150, f"a figure at an unreadable size: {f}"


def solution_lines() -> str:
    """What the instructor's file holds between its solution markers: a student's right answer."""
    text = (REPO / "notebooks" / "exercises" / EXERCISE).read_text()
    return text.split("// BEGIN SOLUTION\n", 1)[1].split("  // END SOLUTION", 1)[0].rstrip("\n")


def edit_exercise(page, lab) -> None:
    """Open the student's .cu in JupyterLab's editor (it must show C++ highlighting), put a right answer
    where the file says `// YOUR CODE HERE` (the line selected, the answer typed over it), and save
    with Ctrl+S."""
    path = f"student/exercises/{EXERCISE}"
    page.evaluate(f"() => {{ window.jupyterapp.commands.execute('docmanager:open', {{path: {path!r}}}); }}")
    page.wait_for_function(f"() => {doc(path)} && {doc(path)}.context.isReady && {doc(path)}.content.editor")
    activate(page, path)
    editor = f"{doc(path)}.content.editor"
    try:    # C++ highlighting: CodeMirror names the language it parses with on the editor's content
        page.wait_for_function(f"() => {doc(path)}.node.querySelector('.cm-content[data-language=\"cpp\"]')",
                               timeout=15_000)
    except Exception:
        shown = page.evaluate(f"() => [{doc(path)}.content.model.mimeType, "
                              f"{doc(path)}.node.querySelector('.cm-content').getAttribute('data-language')]")
        pytest.fail(f"{EXERCISE} opens without C++ highlighting: mime type, language {shown} (the labextension "
                    "labkit-cuda-language, on the JUPYTER_PATH `make lab` sets, adds .cu)")
    line = page.evaluate(f"() => {editor}.model.sharedModel.getSource().split('\\n')"
                         ".findIndex(l => l.trim() === '// YOUR CODE HERE')")
    assert line >= 0, f"no `// YOUR CODE HERE` line in the student's {EXERCISE}"
    page.evaluate(f"() => {{ const e = {editor}; e.focus(); "
                  f"e.setSelection({{start: {{line: {line}, column: 0}}, "
                  f"end: {{line: {line}, column: e.getLine({line}).length}}}}); }}")
    page.keyboard.insert_text(solution_lines())
    page.keyboard.press("Control+s")
    page.wait_for_function(f"() => !{doc(path)}.context.model.dirty")
    saved = (lab["root"] / path).read_text()
    assert solution_lines() in saved and "// BEGIN YOUR CODE" in saved, f"the saved {EXERCISE}:\n{saved}"


def test_the_student_version_of_02_reaches_every_check(lab, page):
    """The student version of 02 opened and Run All: every check cell runs (an unanswered exercise does
    not stop the notebook) and the kernel exercise's check says what is wrong with the blank file;
    after an edit of the .cu in JupyterLab's editor, the same check passes."""
    path = f"student/{STUDENT}"
    open_document(page, lab, path)
    kernel_idle(page, path)
    assert_unmodified_on_open(page, path, lab["root"] / path)
    run_all(page, path)
    cells = code_cells(page, path)
    checks = {c["grade_id"]: (i, c) for i, c in enumerate(cells) if (c["grade_id"] or "").endswith("_check")}
    assert set(checks) == {"02_naive_grid_check", "02_conv_naive_check"}, sorted(checks)
    for gid, (i, c) in checks.items():
        assert c["count"] is not None and c["outputs"], f"Run All never reached the check {gid} (code cell {i})"
    unanswered = output_text(checks["02_naive_grid_check"][1])
    assert "naive_grid: not attempted" in unanswered and "Traceback" not in unanswered, unanswered
    blank = output_text(checks["02_conv_naive_check"][1])
    assert "02_conv_naive.cu: conv_naive_exercise: wrong on the layer" in blank and "outputs wrong" in blank, blank
    edit_exercise(page, lab)
    i = checks["02_conv_naive_check"][0]
    run_cell(page, path, i)
    after = output_text(code_cells(page, path)[i])
    assert "conv_naive_exercise: right on 3 odd layers, every output written: True" in after, after
