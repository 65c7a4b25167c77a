"""The gradebook of a grading run: gradebook.csv (a row per student, points per exercise), gradebook.json
(the same with every check's words), feedback/<student>.md, and on request a leaderboard of kernel
times; ``merge`` joins the partial gradebooks of a Slurm array job into one.  A student whose name
was refused gets a gradebook row with the reason, but no feedback page: the name cannot be a file's.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from .submissions import name_problem

__all__ = ["student_row", "write_gradebook", "read_rows", "merge", "write_leaderboard"]


def student_row(name: str, results: list[dict], problem: str | None = None) -> dict:
    """One student's entry: the exercises' results (rows of the graders) and the totals.  Written
    questions (points None) count towards ``written_max`` only: they are graded by hand."""
    auto = [r for r in results if r["points"] is not None]
    return {"student": name, "problem": problem, "exercises": {r["exercise"]: r for r in results},
            "points": sum(r["points"] for r in auto), "max_points": sum(r["max_points"] for r in auto),
            "written_max": sum(r["max_points"] for r in results if r["points"] is None)}


def _columns(rows: list[dict]) -> list[str]:
    return sorted({k for r in rows for k in r["exercises"]})


def write_gradebook(rows: list[dict], out: Path) -> None:
    out = Path(out)
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    names = _columns(rows)
    with open(out / "gradebook.csv", "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csv.writer(f)
        w.writerow(["student"] + names + ["points", "max_points", "written_max", "problem"])
        for r in rows:
            # A written question's cell is left empty: the instructor fills it in.
            w.writerow([r["student"]] + ["" if r["exercises"].get(n, {}).get("points") is None
                                         else r["exercises"][n]["points"] for n in names]
                       + [r["points"], r["max_points"], r["written_max"], r.get("problem") or ""])
    (out / "gradebook.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        if name_problem(r["student"]) is not None:
            continue
        lines = [f"# {r['student']}", "", f"**{r['points']} of {r['max_points']} points** graded automatically"
                 + (f"; written questions ({r['written_max']} points) are graded by hand" if r["written_max"] else ""),
                 ""]
        if r.get("problem"):
            lines += [f"> {r['problem']}", ""]
        for n in names:
            e = r["exercises"].get(n)
            if e is None:
                continue
            state = "graded by hand" if e["points"] is None else \
                f"{e['points']} / {e['max_points']} ({'passed' if e['ok'] else 'not passed'})"
            lines += [f"## {n}: {state}", "", "```", e["message"], "```", ""]
        (out / "feedback" / f"{r['student']}.md").write_text("\n".join(lines), encoding="utf-8",
                                                             errors="backslashreplace")


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
        lines += [f"## {ex}", "", f"{entries[0]['what']} on {entries[0]['device']}", "",
                  "| rank | student | op time (ms) |", "|---:|---|---:|"]
        lines += [f"| {i} | {t['student']} | {t['ms']:.4f} |" for i, t in enumerate(entries, 1)]
        lines.append("")
    (out / "leaderboard.md").write_text("\n".join(lines))
