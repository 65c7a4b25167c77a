"""The numbers the notebooks' prose quotes are the numbers their stored outputs show.

Notebooks 05, 08 and 09 to 13 describe measurements: their stored outputs come from a GPU run (an H100
for 09 and 12, which prints the H100 run of benchmarks/results it reads; an H200 for 05, 08, 10, 11 and
13), and their prose quotes that run. A number in a summary
that no stored output shows is a number a student cannot check, and usually one left over from an
earlier run. This test reads each notebook's JSON (no kernel runs), takes its summary (the markdown
under its "## Summary" heading) and, for every number quoted there, looks for the same number among
the numbers printed by the notebook's code cells (stream text, and text results that are not a
figure's repr).

"The same number" means the same digits, read with these variations and no others:

* thousands separators: ``482,194`` is ``482194``;
* trailing zeros: ``0.024`` is ``0.0240``;
* fewer decimals, by rounding: ``1.07`` is ``1.0670`` and ``0.48`` is ``0.4837``, when the quoted
  number has at least two significant digits (``0.5`` must be printed as ``0.5``);
* a trailing ``x`` or ``%`` and the unit beside a number (``1.23 ms``, ``1.23ms``) are not part of
  it; the sign is not either (a ``mean -0.33`` is quoted as ``0.33 points``).

Digits inside names are not numbers: ``H100``, ``float32``, ``features.12``, ``3x3``, ``ReLU6``,
and anything in backticks. A number that is not a measurement (a constant of the arithmetic, a
notebook's number) is listed in ``ALLOWED`` with the reason; an entry that the summary no longer
quotes fails the test too, so the list stays small.

The body text quotes many numbers that are not printed: arithmetic on the printed ones (a copy's
megabytes, a ratio of two times), and runs shipped in ``benchmarks/results`` that a sentence names.
So outside the summaries only the numbers that can only be copied from a printout are checked:
those written with three decimals or more (``59.486 ms``, ``0.0836``) and counts of six digits or
more (``481,170``). Each must be shown by an output, or come from the shipped file that
``QUOTED_FROM_FILES`` names for it (the test reads that file), or be one of the few in
``NOT_STORED``, with the reason.
"""
from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CHECKED = ("05_per_layer_tuning.ipynb", "08_alexnet_inference.ipynb",
           "09_transfers_streams_graphs.ipynb", "10_training_a_small_resnet.ipynb", "11_mobilenet_v2.ipynb",
           "12_any_convolution.ipynb", "13_your_network.ipynb")

# Numbers a summary may quote that no output prints, because they are not measurements.
ALLOWED = {
    "05_per_layer_tuning.ipynb": {
        "06": "the next notebook's number, in the summary's last line",
    },
    "08_alexnet_inference.ipynb": {
        "06": "notebook 06, whose implicit GEMMs the summary names",
        "09": "the next notebook's number, in the summary's last line",
        "10": "notebook 10, which the summary's last line names",
        "11": "notebook 11, which the summary's last line names",
        "1.03x": "notebook 09's result (its stored pipeline at batch 1,024 against the compute alone), which "
                 "the summary's last line previews: not a measurement of this notebook's run",
    },
    "09_transfers_streams_graphs.ipynb": {
        "10": "the next notebook's number, in the summary's last line",
    },
    "10_training_a_small_resnet.ipynb": {
        "180": "backward data turns the filters 180 degrees: geometry",
        "2.25x": "F(2x2, 3x3) makes 16 multiplications where the direct method makes 36: arithmetic",
        "4x": "F(4x4, 3x3) makes 36 multiplications for 16 outputs, 2.25 an output against 9: arithmetic",
    },
    "11_mobilenet_v2.ipynb": {
        "2.25": "a depthwise output's 18 flops per 8 bytes moved at stride 1: arithmetic",
    },
    "12_any_convolution.ipynb": {},
    "13_your_network.ipynb": {
        "06": "notebook 06, whose im2col kernel the summary names",
    },
}

RESULTS = NOTEBOOKS.parent / "benchmarks" / "results"

# Precise numbers of the body text quoted from a shipped run that the sentence names:
# (notebook, the cell's id, the number as written) -> the file in benchmarks/results that holds it.
QUOTED_FROM_FILES = {
    ("10_training_a_small_resnet.ipynb", "339ae00b", "0.084"): "cudnn_find_h100.json",
    ("10_training_a_small_resnet.ipynb", "339ae00b", "0.075"): "cudnn_find_h100.json",
    ("10_training_a_small_resnet.ipynb", "339ae00b", "0.106"): "cudnn_find_h100.json",
    ("10_training_a_small_resnet.ipynb", "79d49ac8", "0.031"): "tune_conv_winograd_c16_h100.json",
    ("10_training_a_small_resnet.ipynb", "79d49ac8", "0.032"): "tune_conv_winograd_c16_h100.json",
    ("10_training_a_small_resnet.ipynb", "22c50137", "0.857"): "train_seeds_c16_h100.json",
    ("13_your_network.ipynb", "69e1b4c2", "0.744x"): "onnx_torchvision_h200.json",
}
# Precise numbers of the body text that no stored output or shipped file holds, with the reason.
NOT_STORED = {
    ("05_per_layer_tuning.ipynb", "9c2df503", "0.187"):
        "layer 1's floor, 556.8 MB at notebook 00's H100 copy bandwidth (2,981.6 GB/s): the question's arithmetic",
    ("05_per_layer_tuning.ipynb", "9c2df503", "0.114"):
        "layer 1's 5.81 GFLOP at notebook 00's H100 FP32 rate (51.01 TFLOP/s): the question's arithmetic",
    ("05_per_layer_tuning.ipynb", "9c2df503", "0.109"):
        "layer 2's 323.5 MB at notebook 00's H100 copy bandwidth: the question's arithmetic",
    ("05_per_layer_tuning.ipynb", "9c2df503", "0.305"):
        "layer 2's floor, 15.55 GFLOP at notebook 00's H100 FP32 rate: the question's arithmetic",
    ("05_per_layer_tuning.ipynb", "9c2df503", "0.133"):
        "layer 1's H200 floor that the stored table implies (0.183 ms at 72.9% of it): arithmetic on printed numbers",
    ("05_per_layer_tuning.ipynb", "9c2df503", "0.307"):
        "layer 2's H200 floor that the stored table implies (0.404 ms at 76.1% of it): arithmetic on printed numbers",
    ("05_per_layer_tuning.ipynb", "76c67bb3", "0.133"):
        "layer 1's H200 floor that the stored table implies (0.183 ms at 72.9% of it): arithmetic on printed numbers",
    ("05_per_layer_tuning.ipynb", "76c67bb3", "0.307"):
        "layer 2's H200 floor that the stored table implies (0.404 ms at 76.1% of it): arithmetic on printed numbers",
    ("08_alexnet_inference.ipynb", "42a84c1c", "0.039"):
        "the convolutions' time per image at batch 1,024, 39.443 ms / 1,024: arithmetic on a printed time",
    ("10_training_a_small_resnet.ipynb", "281e00c5", "0.047"):
        "the weight-gradient kernel's time before the two changes that the sentence describes",
    ("10_training_a_small_resnet.ipynb", "22c50137", "0.886"):
        "the best of seven PyTorch runs from seed 0, of which the shipped files hold four",
}

SUMMARY_HEADING = re.compile(r"^##\s+Summary\s*$", re.MULTILINE)
NEXT_HEADING = re.compile(r"^#{1,2}\s", re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
# "3 · 10⁻⁷": a number written with a power of ten.
POWER_OF_TEN = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*[·×]\s*10([⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)")
# A number in prose: not glued to a name before it (H100, features.12) or after it (3x3, ReLU6),
# except to a unit (1.23ms); an optional 'x' or '%' right after it.
UNIT = r"(?:ms|µs|us|ns|s|MB|MiB|KB|KiB|GB|GiB|TB)"
PROSE_NUMBER = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e[-+]\d+)?)(x|%)?"
    r"(?=" + UNIT + r"?(?![\w⁰¹²³⁴⁵⁶⁷⁸⁹⁻]|\.\d))")
OUTPUT_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


def _source(cell) -> str:
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def _value(text: str) -> Decimal:
    return abs(Decimal(text.replace(",", "")))


def output_numbers(nb: dict) -> set[Decimal]:
    """Every number printed by a code cell of the notebook, as stored."""
    found: set[Decimal] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = _source({"source": out.get("text", "")})
            elif "data" in out and "image/png" not in out["data"] and "text/plain" in out["data"]:
                text = _source({"source": out["data"]["text/plain"]})
            else:
                continue
            found.update(_value(m.group(1)) for m in OUTPUT_NUMBER.finditer(text))
    return found


def summary_text(nb: dict, name: str = "notebook") -> str:
    """The markdown under the notebook's one "## Summary" heading, to the next heading or the end of
    its cell. Fails unless there is exactly one such heading."""
    hits = [(i, m) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "markdown"
            for m in SUMMARY_HEADING.finditer(_source(cell))]
    if len(hits) != 1:
        raise AssertionError(f"{name}: expected one '## Summary' heading in a markdown cell, found {len(hits)}")
    i, m = hits[0]
    rest = _source(nb["cells"][i])[m.end():]
    end = NEXT_HEADING.search(rest)
    text = rest[:end.start()] if end else rest
    if not re.search(r"\d", text):
        raise AssertionError(f"{name}: the summary quotes no number at all: is this the summary? {text[:200]!r}")
    return text


def prose_numbers(text: str) -> list[tuple[str, Decimal]]:
    """(the number as written, its value) for every number quoted in markdown prose."""
    text = CODE_SPAN.sub(" ", text)
    found = []

    def power(m):
        found.append((m.group(0), abs(Decimal(m.group(1)) * Decimal(10) ** int(m.group(2).translate(SUPERSCRIPT)))))
        return " "

    text = POWER_OF_TEN.sub(power, text)
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue                                         # headings: section numbers
        for m in PROSE_NUMBER.finditer(line):
            found.append((m.group(1) + (m.group(2) or ""), _value(m.group(1))))
    return found


def _significant_digits(written: str) -> int:
    digits = re.sub(r"[^\d]", "", written.split("e")[0].split("·")[0])
    return len(digits.lstrip("0"))


def is_shown(written: str, value: Decimal, shown: set[Decimal]) -> bool:
    """Whether a number quoted as `written` is one of the numbers `shown`: equal, or a rounding of one
    to the quoted decimals when the quote has at least two significant digits."""
    if value in shown:
        return True
    if _significant_digits(written) < 2:
        return False
    exponent = value.as_tuple().exponent
    places = Decimal(1).scaleb(exponent)
    for o in shown:
        if o.as_tuple().exponent < exponent and any(o.quantize(places, rounding=r) == value
                                                     for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)):
            return True
    return False


def unshown_numbers(nb: dict, allowed: dict[str, str] | None = None, name: str = "notebook") -> list[str]:
    """The numbers of the summary that no stored output shows and `allowed` does not list."""
    allowed = allowed or {}
    shown = output_numbers(nb)
    return [written for written, value in prose_numbers(summary_text(nb, name))
            if written not in allowed and not is_shown(written, value, shown)]


def is_precise(written: str, value: Decimal) -> bool:
    """Whether a quoted number can only have been copied from a printout: three decimals or more,
    or a count of six digits or more."""
    if "e" in written or "·" in written:
        return False
    return -value.as_tuple().exponent >= 3 or value >= 100000


def body_unshown_numbers(nb: dict, excused=frozenset()) -> list[tuple[str, str]]:
    """(cell id, number) of the precise numbers of the markdown that no stored output shows, less
    those whose (cell id, number) is in `excused`."""
    shown = output_numbers(nb)
    return [(cell.get("id", str(i)), written) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "markdown"
            for written, value in prose_numbers(_source(cell))
            if is_precise(written, value) and (cell.get("id", str(i)), written) not in excused
            and not is_shown(written, value, shown)]


def file_numbers(path: Path) -> set[Decimal]:
    """Every number of a JSON file."""
    found: set[Decimal] = set()

    def walk(v):
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            found.add(abs(Decimal(repr(v))))
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(path.read_text(encoding="utf-8")))
    return found


def _load(name: str) -> dict:
    return json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", CHECKED)
def test_summary_quotes_only_stored_numbers(name):
    missing = unshown_numbers(_load(name), ALLOWED[name], name)
    assert not missing, (f"{name}: the summary quotes numbers that no stored output shows: {missing}; "
                         "quote the stored run's numbers, or list a number that is not a measurement "
                         "in ALLOWED with the reason")


@pytest.mark.parametrize("name", CHECKED)
def test_allowed_numbers_are_quoted(name):
    quoted = [written for written, _ in prose_numbers(summary_text(_load(name), name))]
    for written in ALLOWED[name]:
        assert written in quoted, f"{name}: ALLOWED lists {written!r}, which the summary no longer quotes"


@pytest.mark.parametrize("name", CHECKED)
def test_precise_numbers_of_the_body_are_stored(name):
    excused = {(cell, written) for nb_name, cell, written in [*QUOTED_FROM_FILES, *NOT_STORED] if nb_name == name}
    missing = body_unshown_numbers(_load(name), excused)
    assert not missing, (f"{name}: (cell id, number) quoted to three decimals or more, or a count of six "
                         f"digits or more, that no stored output shows: {missing}")


def test_numbers_quoted_from_shipped_files_are_in_those_files():
    for (name, cell_id, written), file in QUOTED_FROM_FILES.items():
        cells = [c for c in _load(name)["cells"] if c.get("id") == cell_id]
        assert cells, f"{name}: no cell {cell_id}"
        quoted = dict(prose_numbers(_source(cells[0])))
        assert written in quoted, f"{name}, cell {cell_id}: {written} is no longer quoted: drop it from QUOTED_FROM_FILES"
        assert is_shown(written, quoted[written], file_numbers(RESULTS / file)), (
            f"{name}, cell {cell_id}: {written} is not in benchmarks/results/{file}")
    for (name, cell_id, written) in NOT_STORED:
        cells = [c for c in _load(name)["cells"] if c.get("id") == cell_id]
        assert cells and written in dict(prose_numbers(_source(cells[0]))), (
            f"{name}, cell {cell_id}: {written} is no longer quoted: drop it from NOT_STORED")


# The check itself, on notebooks made up here.

def _notebook(markdown: str, printed: str) -> dict:
    return {"cells": [
        {"cell_type": "code", "source": "print(...)", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": printed.splitlines(keepends=True)},
            {"output_type": "display_data", "data": {"image/png": "", "text/plain": ["<Figure size 640x480>"]}}]},
        {"cell_type": "markdown", "source": markdown.splitlines(keepends=True)},
    ]}


PRINTED = "batch 1: graph 0.327 ms, PyTorch 0.676 ms, 0.48x; 482194 of 802816 sums; 1.0670 ms; 8.8e-08\n"


def test_a_number_no_output_shows_is_caught():
    nb = _notebook("## Summary\n\n* As a graph: **0.54x** PyTorch's time (0.327 ms against 0.676 ms).\n", PRINTED)
    assert unshown_numbers(nb) == ["0.54x"]


def test_a_stale_count_and_a_stale_time_are_caught():
    nb = _notebook("## Summary\n\n* 481,170 of 802,816 sums differ; 1.08 ms; 0.5 ms; 640 ms.\n", PRINTED)
    assert unshown_numbers(nb) == ["481,170", "1.08", "0.5", "640"]


def test_the_formatting_variations_are_read_as_the_same_number():
    nb = _notebook("## Summary\n\n* 482,194 of 802,816 sums; 0.327ms and 0.68 ms; **0.48x**; 1.07 ms, "
                   "1.0670 ms; from 8.8e-08; 3.27 · 10⁻¹ ms.\n", PRINTED)
    assert unshown_numbers(nb) == []


def test_digits_in_names_and_code_are_not_numbers():
    nb = _notebook("## Summary\n\n* On an H100, in float32, features.12's 3x3 layer, `tile(16, 99)`, "
                   "F(4x4, 3x3) and ReLU6.\n\n## Next\n\n* 12345 ms\n", PRINTED)
    assert prose_numbers(summary_text(nb)) == []


def test_the_allow_list_is_honoured():
    nb = _notebook("## Summary\n\n* 2.25x fewer multiplications; 0.327 ms.\n", PRINTED)
    assert unshown_numbers(nb) == ["2.25x"]
    assert unshown_numbers(nb, {"2.25x": "arithmetic"}) == []


def test_a_notebook_without_a_summary_fails_loudly():
    with pytest.raises(AssertionError, match="Summary"):
        summary_text(_notebook("## Conclusions\n\n* 0.48x\n", PRINTED))
    with pytest.raises(AssertionError, match="Summary"):
        summary_text({"cells": [_notebook("## Summary\n\n* 1 ms\n", "")["cells"][1]] * 2})


def test_a_stale_precise_number_of_the_body_is_caught():
    nb = _notebook("From the run stored above: **481,170 of 802,816** sums differ; 0.0836 against "
                   "0.327 ms; 0.68 ms and 11.98 ms, ratios and sums of printed numbers, are not checked.\n", PRINTED)
    nb["cells"][1]["id"] = "c1"
    assert body_unshown_numbers(nb) == [("c1", "481,170"), ("c1", "0.0836")]
    assert body_unshown_numbers(nb, {("c1", "0.0836")}) == [("c1", "481,170")]
