"""benchmarks/roofline.py on the CPU executor: a row for every plan step, the floor's precision per
step, the markdown table and the plot written."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("roofline_bench", BENCH / "roofline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cases_follow_the_issue(script):
    gpu = script.cases(script.NETS, quick=False, gpu=True)
    assert ("alexnet", "tf32", 1024) in gpu and ("alexnet", "fp32", 64) in gpu
    assert [c for c in gpu if c[0] == "alexnet_auto"] == [("alexnet_auto", "fp32", 1024), ("alexnet_auto", "fp32", 64)]
    assert ("fashion", "fp32", 10000) in gpu and ("resnet", "fp32", 1024) in gpu and ("mobilenet", "fp32", 256) in gpu
    assert all(p == "fp32" for _n, p, _b in script.cases(script.NETS, quick=False, gpu=False))  # no TF32 on a CPU


def test_fashion_on_the_cpu_executor(script, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["roofline.py", "--out", str(tmp_path), "--nets", "fashion", "--repeat", "1",
                                      "--warmup", "0"])
    assert script.main() == 0
    doc = json.loads((tmp_path / "roofline_cpu.json").read_text())
    assert doc["backend"] == "cpu" and "not a GPU's" in doc["meta"]["note"]
    steps = [r["step"] for r in doc["rows"]]
    assert steps == ["conv1 + tanh + pool (fused)", "conv2 + tanh (tuned)", "dense 5184->140 + tanh",
                     "dense 140->10", "softmax"]
    for r in doc["rows"]:
        assert r["batch"] == 4 and r["floor_precision"] == "fp32" and r["measured_ms"] > 0
        assert r["percent_of_floor"] == pytest.approx(100 * r["floor_ms"] / r["measured_ms"])
    md = (tmp_path / "roofline_cpu.md").read_text()
    assert "## FashionNet FP32 batch 4" in md and "| **all steps** |" in md
    assert (tmp_path / "roofline_cpu.png").stat().st_size > 0


def test_tensor_core_steps_are_the_implicit_gemm_convolutions():
    from labkit.ladder.floors import tensor_core_steps
    from labkit.models import alexnet, mobilenet_v2 as mb
    names = list(alexnet.AlexNet(alexnet.load_weights()[0]).step_costs(2))
    assert tensor_core_steps("alexnet", names) == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    assert tensor_core_steps("alexnet", names, 64) == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    assert tensor_core_steps("alexnet", names, alexnet.TF32_DENSE_ROWS)[5:] == ["fc6", "fc7", "fc8"]   # TF32 dense
    names = list(mb.MobileNetV2(mb.synthetic_weights()).step_costs(2))
    tc = tensor_core_steps("mobilenet", names)
    assert len(tc) == 2 + 16 + 17 and "features.1.dw" not in tc and "classifier" not in tc
