"""The gradebook of a grading run: gradebook.csv (a row per student, points per exercise), gradebook.json
(the same with every check's words), feedback/<student>.md, and on request a leaderboard of kernel
times; ``merge`` joins the partial gradebooks of a Slurm array job into one.

Everything a student wrote or named (names, written answers, check messages, compiler output, file
names) is data in these files, never their structure: a spreadsheet cell that would start a formula
gets a leading ``'``; on a Markdown page a name is escaped, a table cell cannot close its cell or row,
and a text is fenced by more backticks than any run of them it holds, so it cannot close its fence
and write the page's points.  A student whose name was refused gets a gradebook row, but no
feedback page: the name cannot be a file's.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from .submissions import name_problem, shown

__all__ = ["student_row", "write_gradebook", "read_rows", "merge", "write_leaderboard", "csv_cell", "md_text",
           "md_block"]

# A cell starting with one of these is a formula (or starts one) to Excel, LibreOffice and Sheets.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_MD_PUNCTUATION = re.compile(r"""([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")
_BACKTICKS = re.compile(r"`+")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def student_row(name: str, results: list[dict], problem: str | None = None) -> dict:
    """One student's entry: the exercises' results (rows of the graders) and the totals.  Written
    questions (points None) count towards ``written_max`` only: they are graded by hand."""
    auto = [r for r in results if r["points"] is not None]
    return {"student": name, "problem": problem, "exercises": {r["exercise"]: r for r in results},
            "points": sum(r["points"] for r in auto), "max_points": sum(r["max_points"] for r in auto),
            "written_max": sum(r["max_points"] for r in results if r["points"] is None)}


def _columns(rows: list[dict]) -> list[str]:
    return sorted({k for r in rows for k in r["exercises"]})


def csv_cell(value):
    """A spreadsheet cell for ``value``: text that a spreadsheet would read as a formula gets a leading
    ``'`` (shown as text, as OWASP advises); numbers stay numbers."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value


def md_text(text: str) -> str:
    """``text`` as literal Markdown inline text, on one line: every ASCII punctuation character
    backslash-escaped (CommonMark allows it for each), so no emphasis, link, HTML, heading or table
    cell boundary ``|`` comes of it; line breaks and control characters written as escapes."""
    return _MD_PUNCTUATION.sub(r"\\\1", shown(str(text)))


def md_block(text: str) -> str:
    """``text`` as a fenced code block whose fence is longer than any run of backticks in it, so no line
    of it can close the block (CommonMark: the closing fence is at least as long as the opening);
    control characters other than line breaks and tabs written as escapes (a terminal showing the
    page obeys none of them), backslashes kept as they are (code, LaTeX)."""
    text = "\n".join(_CONTROL.sub(lambda m: ascii(m.group())[1:-1], line) for line in str(text).splitlines())
    fence = "`" * max(3, 1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    return f"{fence}\n{text}\n{fence}"


def write_gradebook(rows: list[dict], out: Path) -> None:
    out = Path(out)
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    names = _columns(rows)
    with open(out / "gradebook.csv", "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csv.writer(f)
        w.writerow([csv_cell(c) for c in ["student"] + names + ["points", "max_points", "written_max", "problem",
                                                               "seed", "sandbox"]])
        for r in rows:
            # A written question's cell is left empty: the instructor fills it in.  ``seed``: the student's
            # shapes can be drawn again from it; ``sandbox``: where the student's code ran.
            w.writerow([csv_cell(c) for c in [r["student"]] + ["" if r["exercises"].get(n, {}).get("points") is None
                                                                else r["exercises"][n]["points"] for n in names]
                        + [r["points"], r["max_points"], r["written_max"], r.get("problem") or "",
                           r.get("seed", ""), r.get("sandbox", "")]])
    (out / "gradebook.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        if name_problem(r["student"]) is None:
            (out / "feedback" / f"{r['student']}.md").write_text(_feedback(r, names), encoding="utf-8",
                                                                 errors="backslashreplace")


def _feedback(r: dict, names: list[str]) -> str:
    """A student's feedback page: the points, then each exercise's verdict in the check's words."""
    lines = [f"# {md_text(r['student'])}", "", f"**{r['points']} of {r['max_points']} points** graded automatically"
             + (f"; written questions ({r['written_max']} points) are graded by hand" if r["written_max"] else ""), ""]
    if r.get("problem"):
        lines += ["The submission could not be graded:", "", md_block(r["problem"]), ""]
    for n in names:
        e = r["exercises"].get(n)
        if e is None:
            continue
        state = "graded by hand" if e["points"] is None else \
            f"{e['points']} / {e['max_points']} ({'passed' if e['ok'] else 'not passed'})"
        lines += [f"## {n}: {state}", "", md_block(e["message"]), ""]    # n: the instructor's exercise name
    return "\n".join(lines)


def read_rows(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text())


def merge(parts: list[Path], out: Path) -> list[dict]:
    """One gradebook from the gradebook.json of each of ``parts`` (folders); students sorted by name."""
    rows = [r for p in parts for r in read_rows(Path(p) / "gradebook.json")]
    rows.sort(key=lambda r: r["student"])
    write_gradebook(rows, out)
    times = [t for p in parts if (Path(p) / "times.json").is_file() for t in read_rows(Path(p) / "times.json")]
    if times:
        write_leaderboard(times, out)
    return rows


def write_leaderboard(times: list[dict], out: Path) -> None:
    """times: {"student", "exercise", "ms", "device"} of every passing kernel; per exercise, fastest
    first, in leaderboard.md and leaderboard.json (times.json keeps the raw rows for merging)."""
    out = Path(out)
    (out / "times.json").write_text(json.dumps(times, indent=1))
    board: dict[str, list] = {}
    for t in sorted(times, key=lambda t: (t["exercise"], t["ms"])):
        board.setdefault(t["exercise"], []).append(t)
    (out / "leaderboard.json").write_text(json.dumps(board, indent=1))
    lines = ["# Kernel leaderboard", ""]
    for ex, entries in board.items():
        lines += [f"## {ex}", "", f"{entries[0]['what']} on {entries[0]['device']}", "",     # the grader's words
                  "| rank | student | op time (ms) |", "|---:|---|---:|"]
        lines += [f"| {i} | {md_text(t['student'])} | {t['ms']:.4f} |" for i, t in enumerate(entries, 1)]
        lines.append("")
    (out / "leaderboard.md").write_text("\n".join(lines), encoding="utf-8", errors="backslashreplace")
