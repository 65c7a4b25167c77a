"""The per-layer tuned convolution (conv_tuned.cu) and its tuning table (labkit.ops.tuned_config).

Every configuration a sweep may pick must be correct, so configurations are checked against the
float64 reference on odd layers whose batch the images-per-block do not divide and whose rows the
outputs-per-thread do not divide, into a NaN-poisoned output.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import labkit
from labkit.checks import rel_error
from labkit.ladder import tuning as study
from labkit.ops import tuned_config as tuning
from labkit.ops.conv import conv2d, conv_launch_config
from labkit.ops.tuned_config import TunedConfig

from helpers import expected, make_layer, run

CONFIGS = [TunedConfig(32, 1, 1, "constant"), TunedConfig(64, 2, 3, "constant"),
           TunedConfig(128, 3, 4, "shared"), TunedConfig(96, 1, 2, "shared")]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short().replace(" ", "-"))
@pytest.mark.parametrize("shape", [(5, 3, 13, 11, 5, 3), (4, 1, 20, 17, 6, 5), (3, 2, 9, 10, 7, 1),
                                   (3, 2, 20, 20, 8, 5)],
                         ids=lambda s: "N{}C{}H{}W{}M{}K{}".format(*s))
def test_every_configuration_matches_reference(cfg, shape):
    x, w, b = make_layer(*shape)
    y = run(x, w, b, variant="tuned", activation="tanh", config=cfg)
    assert not np.isnan(y).any(), "some outputs were never written"
    assert rel_error(y, expected(x, w, b, "tanh")) < 1e-5


@pytest.mark.parametrize("cfg, shape", [
    (TunedConfig(64, 1, 4, "shared", 4), (3, 2, 20, 20, 8, 5)),     # 16-byte weight loads and stores
    (TunedConfig(64, 2, 3, "shared", 4), (3, 3, 13, 14, 8, 3)),     # odd rows, chunks of 4
    (TunedConfig(32, 1, 2, "shared", 3), (2, 2, 11, 12, 6, 3)),     # chunks of 3: scalar loads
    (TunedConfig(96, 2, 4, "constant"), (3, 1, 24, 24, 6, 5)),      # 16-byte stores, constant weights
], ids=lambda v: v.short().replace(" ", "-") if isinstance(v, TunedConfig) else "N{}C{}H{}W{}M{}K{}".format(*v))
def test_channel_chunks_and_vector_stores(cfg, shape):
    x, w, b = make_layer(*shape)
    y = run(x, w, b, variant="tuned", activation="tanh", config=cfg)
    assert rel_error(y, expected(x, w, b, "tanh")) < 1e-5


@pytest.mark.check
def test_two_layers_of_one_shape_get_their_own_weights():
    # The module (and its __constant__ weights) is cached per shape: weights are copied per call.
    for _ in range(2):
        x, w, b = make_layer(2, 2, 11, 12, 3, 3)
        assert rel_error(run(x, w, b, variant="tuned"), expected(x, w, b, None)) < 1e-5


def test_launch_config_of_tuned():
    cfg = TunedConfig(threads=256, imgs=2, out_w=4)
    assert conv_launch_config("tuned", 5, 6, 22, 22, 16, 5, config=cfg) == ((3, 1, 1), (256, 1, 1), 0)


def test_default_config_fits_seed_layers():
    for C, H, W, M, K in [(1, 48, 48, 6, 5), (6, 22, 22, 16, 5)]:
        cfg = tuning.default_config(C, H, W, M, K)
        tuning.check_config(cfg, C, H, W, M, K)
        assert cfg.weights == "constant"
    # A layer whose weights fit neither constant memory nor, beside its image, shared memory is not
    # this kernel's: the error says which variant to use.
    with pytest.raises(ValueError, match="variant='tiled'"):
        tuning.default_config(64, 8, 8, 64, 3)


@pytest.mark.parametrize("cfg, shape, match", [
    (TunedConfig(128, 1, 2, "constant"), (3, 120, 120, 4, 3), r"stages 1 whole 3x120x120.*variant='tiled'"),
    (TunedConfig(128, 1, 2, "constant"), (64, 6, 6, 64, 3), r"over the 64 KiB.*weights='shared'"),
    (TunedConfig(100, 1, 2, "constant"), (1, 8, 8, 2, 3), r"multiple of 32"),
    (TunedConfig(128, 1, 2, "global"), (1, 8, 8, 2, 3), r"weights must be one of"),
    (TunedConfig(128, 1, 2, "shared", 5), (1, 8, 8, 8, 3), r"m_chunk must divide M=8"),
])
def test_configurations_that_cannot_run_are_refused(cfg, shape, match):
    with pytest.raises(ValueError, match=match):
        tuning.check_config(cfg, *shape)


def test_refused_before_launch_through_conv2d():
    xp = labkit.xp
    x, w, b = make_layer(1, 3, 120, 120, 4, 3)
    with pytest.raises(ValueError, match="shared memory"):
        conv2d(xp.asarray(x), xp.asarray(w), xp.asarray(b), variant="tuned")
    with pytest.raises(TypeError, match="TunedConfig"):
        conv2d(xp.asarray(x), xp.asarray(w), xp.asarray(b), variant="tuned", config={"threads": 64})


@pytest.mark.check
def test_table_lookup_and_record(tmp_path, monkeypatch):
    table = tmp_path / "conv_tuned.json"
    monkeypatch.setattr(tuning, "TABLE", table)
    shape = dict(C=6, H=22, W=22, M=16, K=5)
    assert tuning.tuned_config(**shape, device_name="Some GPU") == tuning.default_config(**shape)
    won = TunedConfig(256, 2, 3, "shared")
    study.record_winner(**shape, config=won, device_name="Some GPU", median_ms=0.42, batch=10_000,
                         table=table)
    assert tuning.tuned_config(**shape, device_name="Some GPU") == won
    assert tuning.tuned_config(**shape, device_name="Another GPU") == tuning.default_config(**shape)
    entry = json.loads(table.read_text())["gpus"]["Some GPU"]["C6_H22_W22_M16_K5"]
    assert entry["median_ms"] == 0.42 and entry["batch"] == 10_000


@pytest.mark.check
def test_shipped_table_entries_are_valid():
    data = json.loads(tuning.TABLE.read_text())
    for gpu, layers in data["gpus"].items():
        for key, entry in layers.items():
            C, H, W, M, K = (int(part[1:]) for part in key.split("_"))
            cfg = TunedConfig(entry["threads"], entry["imgs"], entry["out_w"], entry["weights"],
                              entry.get("m_chunk", 0))
            tuning.check_config(cfg, C, H, W, M, K)


@pytest.mark.check
def test_sweep_checks_and_times_each_candidate():
    configs = [TunedConfig(32, 1, 2, "constant"), TunedConfig(64, 2, 1, "shared")]
    rows, best = study.sweep_tuned(1, 10, 9, 2, 3, batch=3, configs=configs, repeat=1, progress=False)
    assert [r["config"] for r in rows] == [c.short() for c in configs]
    assert best in configs
    assert best == configs[min(range(2), key=lambda i: rows[i]["median_ms"])]
