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
``__host__``, ``__global__``, ``__device__``: inside a body it can only declare a function defined
elsewhere, which NVRTC lets through and the CPU executor, where ``__device__`` is nothing, links to
the C library), a line continued by a backslash, an unterminated comment, string or
character literal, a raw string, or braces and parentheses that do not balance (a ``}`` that would
close the kernel and open the file to host code).  The sandbox is the guarantee; this is the
defence in front of it, and what tells a student plainly that such code is not the exercise.

A whole file that a student's function returns (notebook 03's ``fix(source)``) has no markers: there
``splice_bodies`` takes the bodies of the named kernels from it, each held to the same rules as a
region, into the instructor's file.

    text, changed = splice_bodies(instructor_text, returned_text, ("histogram", "block_sum"))
"""
from __future__ import annotations

import re

from ..errors import RegionError

__all__ = ["RegionError", "regions", "splice", "splice_bodies", "refusal", "BEGIN", "END"]

BEGIN = re.compile(r"^\s*// BEGIN (?:SOLUTION|YOUR CODE)\b.*$")
END = re.compile(r"^\s*// END (?:SOLUTION|YOUR CODE)\b.*$")
_REFUSED_WORDS = ("asm", "__asm", "__asm__", "_Pragma", "extern", "static", "template", "namespace", "__host__",
                  "__global__", "__device__", "__attribute__", "__declspec")
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


def _blanked(text: str, where: str) -> str:
    """``text`` with every comment, string and character literal turned into spaces (line breaks
    kept), so that a position in it is the same position in ``text`` and braces in them do not
    count.  RegionError for a raw string, which this reading cannot tell apart safely."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        two = text[i:i + 2]
        if two == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif two == "/*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text[i] in "\"'":
            if text[i] == '"' and _RAW_PREFIX.search(text[max(0, i - 4):i]):
                raise RegionError(f"{where}: line {text.count(chr(10), 0, i) + 1} holds a raw string literal "
                                  "(R\"...\"), which the grader does not read")
            j = i + 1
            while j < n and text[j] not in (text[i], "\n"):
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def _body(blank: str, kernel: str, where: str) -> tuple[int, int]:
    """(start, end) of ``kernel``'s body in the blanked text: what lies between its braces."""
    found = list(re.finditer(r"(?<![A-Za-z_0-9])__global__\s+void\s+" + re.escape(kernel) + r"\s*\(", blank))
    if len(found) != 1:
        raise RegionError(f"{where} {'has no' if not found else 'has more than one'} kernel {kernel!r} "
                          f"(a line __global__ void {kernel}(...)): keep the file's kernels as they are and change "
                          "what their bodies do")
    depth, i = 1, found[0].end()
    while i < len(blank) and depth:
        depth += {"(": 1, ")": -1}.get(blank[i], 0)
        i += 1
    while i < len(blank) and blank[i].isspace():
        i += 1
    if depth or i >= len(blank) or blank[i] != "{":
        raise RegionError(f"{where}: the kernel {kernel!r} has no body in braces after its parameters")
    start, depth, i = i + 1, 1, i + 1
    while i < len(blank) and depth:
        depth += {"{": 1, "}": -1}.get(blank[i], 0)
        i += 1
    if depth:
        raise RegionError(f"{where}: the body of the kernel {kernel!r} is never closed")
    return start, i - 1


def splice_bodies(instructor: str, student: str, kernels, *, name: str = "the kernel file") -> tuple[str, bool]:
    """The instructor's source with the bodies of ``kernels`` replaced by those of the student's whole
    file, each held to ``refusal``'s rules (statements of a kernel's body, nothing that reaches
    outside it); everything else of the student's file is dropped.  Returns (the source, whether the
    student's file differs from the instructor's outside those bodies, whitespace aside).
    RegionError says what is missing or refused, and where."""
    ours = sorted((_body(_blanked(instructor, f"the instructor's {name}"), k, f"the instructor's {name}"), k)
                  for k in kernels)
    blank = _blanked(student, f"your {name}")
    theirs = sorted((_body(blank, k, f"your {name}"), k) for k in kernels)
    bodies = {}
    for (start, end), kernel in theirs:
        why = refusal(student[start:end].split("\n"))
        if why is not None:
            # refusal counts the body's lines from its first, the one that holds the opening brace
            first = student.count("\n", 0, start)
            why = re.sub(r"^its line (\d+)", lambda m: f"its line {first + int(m.group(1))}", why)
            raise RegionError(f"your {name}: the body of {kernel!r} is not graded: {why}")
        bodies[kernel] = student[start:end]
    out, last = [], 0
    for (start, end), kernel in ours:
        out += [instructor[last:start], bodies[kernel]]
        last = end
    out.append(instructor[last:])

    def outside(text: str, spans) -> str:
        cuts = [0] + [x for (a, b), _ in spans for x in (a, b)] + [len(text)]
        return " ".join(" ".join(text[cuts[i]:cuts[i + 1]].split()) for i in range(0, len(cuts), 2))
    return "".join(out), outside(instructor, ours) != outside(student, theirs)
