"""cuDNN's algorithm table: the stored H100 table is whole and readable; on a machine without cuDNN
the find API is refused with the way to the stored table."""
from __future__ import annotations

import json

import pytest

import labkit
from labkit.peers import cudnn as ca
from labkit.shapes import ConvLayer

pytestmark = pytest.mark.check


def test_the_stored_table_has_every_pass_of_every_layer():
    table = ca.stored_table()
    assert table["device"].startswith("NVIDIA") and table["meta"]["cudnn_version"] >= 8000
    for row in table["rows"]:
        for math in ("fp32", "tf32"):
            for name in ca.PASS_NAMES:
                algos = row[math][name]
                assert algos, (row["layer"], math, name)
                assert all(a["algo"] in ca.ALGOS[name] and a["ms"] > 0 and a["workspace_MiB"] >= 0 for a in algos)
                assert [a["ms"] for a in algos] == sorted(a["ms"] for a in algos)
        assert set(row["labkit_ms"]) <= set(ca.PASS_NAMES) and all(v > 0 for v in row["labkit_ms"].values())


def test_a_file_that_is_not_a_table_is_refused(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"rows": 3}))
    with pytest.raises(ValueError, match="not a cuDNN algorithm table"):
        ca.stored_table(bad)


@pytest.mark.skipif(labkit.device().is_gpu, reason="on a GPU the find API runs (benchmarks/cudnn_find.py)")
def test_without_cudnn_the_find_api_points_to_the_stored_table():
    with pytest.raises(RuntimeError, match="stored_table"):
        ca.find_algorithms(ConvLayer(16, 28, 28, 16, 3, 1, 1), 4)
