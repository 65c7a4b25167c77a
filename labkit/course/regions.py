"""A kernel exercise as the grader builds it: the instructor's file, with each solution region replaced
by the student's region of the same place, and nothing else of the student's file.

    text = splice(instructor_text, student_text)     # RegionError says what to change, and where

The student's file marks each region with the lines ``// BEGIN YOUR CODE`` and ``// END YOUR CODE``
(the student copy writes them; the instructor's ``// BEGIN SOLUTION`` / ``// END SOLUTION`` are
taken too).  Whatever lies outside them (a changed bounds check, an extra function, host code,
an ``#include``) is not graded: the instructor's lines stand there.

A region is statements inside a kernel's body, so it is refused (with what to remove) when it holds
what could reach outside that body: a preprocessor line (``#``, ``%:``; ``#pragma unroll`` alone is
taken), ``asm``, ``_Pragma``,
declarations that live beyond the function (``extern``, ``static``, ``template``, ``namespace``,
``__host__``, ``__global__``), a line continued by a backslash, an unterminated comment, string or
character literal, a raw string, or braces and parentheses that do not balance (a ``}`` that would
close the kernel and open the file to host code).  The sandbox is the guarantee; this is the
defence in front of it, and what tells a student plainly that such code is not the exercise.
"""
from __future__ import annotations

import re

from ..errors import RegionError

__all__ = ["RegionError", "regions", "splice", "refusal", "BEGIN", "END"]

BEGIN = re.compile(r"^\s*// BEGIN (?:SOLUTION|YOUR CODE)\b.*$")
END = re.compile(r"^\s*// END (?:SOLUTION|YOUR CODE)\b.*$")
_REFUSED_WORDS = ("asm", "__asm", "__asm__", "_Pragma", "extern", "static", "template", "namespace", "__host__",
                  "__global__", "__attribute__", "__declspec")
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_RAW_PREFIX = re.compile(r"(?:^|[^A-Za-z_0-9])(?:u8|[uUL])?R$")     # R"( ... )", u8R"( ... )"
_UNROLL = re.compile(r"^#\s*pragma\s+unroll(?:\s+\d+)?$")


def regions(text: str, where: str) -> list[tuple[int, list[str]]]:
    """[(line number of the BEGIN marker, the lines between it and its END)], in order."""
    out, current, start = [], None, 0
    for i, line in enumerate(text.splitlines(), 1):
        if BEGIN.match(line):
            if current is not None:
                raise RegionError(f"{where}, line {i}: a BEGIN line inside the region opened at line {start}")
            current, start = [], i
        elif END.match(line):
            if current is None:
                raise RegionError(f"{where}, line {i}: an END line with no BEGIN before it")
            out.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        raise RegionError(f"{where}: the region opened at line {start} has no END line")
    return out


def _strip_literals(line: str, state: dict) -> str:
    """``line`` with comments, strings and character literals blanked (so that braces and words in
    them do not count); ``state["comment"]`` carries an open block comment to the next line.
    RegionError for what cannot be told apart safely."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["comment"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["comment"], i = False, end + 2
            continue
        two = line[i:i + 2]
        if two == "//":
            break
        if two == "/*":
            state["comment"], i = True, i + 2
            continue
        c = line[i]
        if c in "\"'":
            if c == '"' and _RAW_PREFIX.search(line[:i]):
                raise RegionError("a raw string literal (R\"...\")")
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            if j >= n:
                raise RegionError(f"a {'string' if c == chr(34) else 'character'} literal that does not end on its line")
            out.append(" ")
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def refusal(lines: list[str]) -> str | None:
    """None if the region's lines are statements a kernel body may hold, else what to remove."""
    state, depth = {"comment": False}, {"{": 0, "(": 0, "[": 0}
    closing = {"}": "{", ")": "(", "]": "["}
    for k, line in enumerate(lines, 1):
        if line.rstrip().endswith("\\"):
            return f"its line {k} ends with a backslash (a continued line): write the statement on one line"
        if "??" in line and re.search(r"\?\?[=/'()!<>\-]", line):
            return f"its line {k} holds a trigraph (??=, ??/ ...): write the character itself"
        try:
            code = _strip_literals(line, state)
        except RegionError as exc:
            return f"its line {k} holds {exc}"
        stripped = code.strip()
        if _UNROLL.match(stripped):
            continue                       # the one directive a loop in a region may need, and harmless
        if stripped.startswith("#") or "%:" in code:
            return (f"its line {k} is a preprocessor line ({stripped[:40]!r}): a region holds statements "
                    "(and #pragma unroll) only; the file's own #define and #include lines stay as the "
                    "instructor wrote them")
        for word in _WORD.findall(code):
            if word in _REFUSED_WORDS:
                return (f"its line {k} uses {word!r}: a region holds statements of the kernel's body, not "
                        "declarations that live outside it, inline assembly or pragmas")
        for ch in code:
            if ch in depth:
                depth[ch] += 1
            elif ch in closing:
                depth[closing[ch]] -= 1
                if depth[closing[ch]] < 0:
                    return (f"its line {k} closes a {closing[ch]!r} it did not open: a region may not close "
                            "the kernel's body (or a bracket around it)")
    if state["comment"]:
        return "a /* comment that does not end inside the region"
    open_ = [b for b, d in depth.items() if d]
    if open_:
        return f"a {open_[0]!r} that is not closed inside the region"
    return None


def splice(instructor: str, student: str, *, name: str = "the kernel file") -> str:
    """The instructor's source with its solution regions replaced, in order, by the student's; the
    student's markers and anything outside them are dropped.  RegionError if the student's file has
    another number of regions, or a region holds what ``refusal`` refuses."""
    theirs = regions(student, f"your {name}")
    ours = regions(instructor, f"the instructor's {name}")
    if len(theirs) != len(ours):
        raise RegionError(f"your {name} has {len(theirs)} region(s) between // BEGIN YOUR CODE and // END YOUR "
                          f"CODE lines, the exercise has {len(ours)}: keep those lines as the student copy has them, "
                          "and write your code between them")
    for start, lines in theirs:
        why = refusal(lines)
        if why is not None:
            raise RegionError(f"your {name}: the region that starts at line {start} is not graded: {why}")
    out, k, inside = [], 0, False
    for line in instructor.splitlines():
        if BEGIN.match(line):
            out.append(line)
            out += theirs[k][1]
            inside = True
        elif END.match(line):
            out.append(line)
            k, inside = k + 1, False
        elif not inside:
            out.append(line)
    return "\n".join(out) + ("\n" if instructor.endswith("\n") else "")
