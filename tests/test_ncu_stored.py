"""labkit.measure.ncu_stored: ncu's stored H100 counts read per case, and printed beside a count made
here (notebooks 02-05).  The stored file is read as the benchmark wrote it; the table's numbers are
the records' and the file's, compared launch by launch."""
from __future__ import annotations

import json

import numpy as np
import pytest

import labkit
from labkit.measure.ncu_stored import SHOWN, beside_ncu, stored_case
from labkit.results import SHIPPED_DIR
from labkit.shapes import SEED_LAYERS

SECTORS_LD = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"


@pytest.mark.check
def test_a_stored_case_is_the_files_ncu_side():
    raw = json.loads((SHIPPED_DIR / "counters_h100.json").read_text())
    case = next(c for c in raw["cases"] if c["case"] == "ladder/tiled")
    s = stored_case("ladder/tiled")
    assert (s["device"], s["batch"], s["date"]) == (raw["device"], raw["batch"], raw["date"])
    [launch] = s["launches"]
    assert (launch["kernel"], launch["grid"], launch["block"]) == ("conv_tiled", (2, 16, 4), (16, 16, 1))
    assert launch["ncu"][SECTORS_LD] == case["ncu"][0][SECTORS_LD]


def test_an_unknown_case_names_the_known_ones():
    with pytest.raises(KeyError, match="no case 'ladder/nope'.*ladder/naive"):
        stored_case("ladder/nope")


def _record(**values):
    rec = {"kernel": "conv_naive", "grid": (2, 16, 4), "block": (16, 16, 1)}
    rec.update({m: 0 for m in SHOWN})
    rec.update(values)
    return rec


def test_the_table_puts_each_count_beside_ncus():
    s = stored_case("ladder/naive")
    ncu = s["launches"][0]["ncu"][SECTORS_LD]
    lines = beside_ncu([_record(**{SECTORS_LD: ncu * 2})], s, [SECTORS_LD]).splitlines()
    assert lines[1] == "launch 0: conv_naive grid (2, 16, 4) block (16, 16, 1)"
    assert lines[3].split() == ["global", "loads:", "32-byte", "sectors", f"{2 * ncu:,}", f"{ncu:,}", "2.00"]
    other = beside_ncu([_record(kernel="conv_tiled")], s, [SECTORS_LD])
    assert "NOT the stored launch (conv_naive" in other
    assert "2 launches counted here, 1 stored" in beside_ncu([_record(), _record()], s, [SECTORS_LD])
    with pytest.raises(ValueError, match="not a labkit.counters metric: bogus"):
        beside_ncu([_record()], s, ["bogus"])


def test_the_naive_rung_counted_here_equals_ncus_global_counts():
    """The stored problem (seed layer 2, batch 2) counted now: the naive kernel's global requests and
    sectors are exactly ncu's (benchmarks/results/counters_h100_comparison.md)."""
    s = stored_case("ladder/naive")
    L = SEED_LAYERS["layer 2"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((s["batch"], L["C"], L["H"], L["W"]), dtype=np.float32)
    w = rng.standard_normal((L["M"], L["C"], L["K"], L["K"]), dtype=np.float32)
    [rec] = labkit.counters(lambda: labkit.conv2d(x, w, variant="naive"))
    for m in list(SHOWN)[:4]:
        assert rec[m] == s["launches"][0]["ncu"][m], m
