"""torchvision's CNNs exported by torch.onnx.export and run by labkit.import_onnx, against PyTorch on
the same images (small planes: the CPU executor is slow).  Skipped where torch or torchvision is not
installed; benchmarks/onnx_torchvision.py does the same at 224 x 224 on a GPU, and times it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy

torch = pytest.importorskip("torch", reason="exporting torchvision's networks needs PyTorch")
torchvision = pytest.importorskip("torchvision", reason="the networks are torchvision's")
pytest.importorskip("onnx", reason="the importer needs the onnx package")


def _benchmark():
    """benchmarks/onnx_torchvision.py as a module: its seeded networks are the ones checked here."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "onnx_torchvision.py"
    spec = importlib.util.spec_from_file_location("onnx_torchvision", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def exported(tmp_path, name: str, hw: int):
    """(torch model, ONNX path): the benchmark's seeded network (batch-norm statistics randomized too,
    so that folding them is tested), exported at batch 1 with a dynamic batch axis."""
    model = _benchmark().make_model(torch, torchvision, name, 0)
    path = tmp_path / f"{name}.onnx"
    try:
        torch.onnx.export(model, (torch.randn(1, 3, hw, hw),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    except (TypeError, ImportError, RuntimeError) as exc:     # a torch without the TorchScript exporter
        pytest.skip(f"this PyTorch cannot export with the TorchScript exporter: {exc}")
    return model, path


@pytest.mark.parametrize("name,hw", [("resnet18", 64), ("mobilenet_v2", 64), ("squeezenet1_1", 96),
                                     ("googlenet", 96), ("densenet121", 64)])
def test_a_torchvision_network_through_onnx_equals_pytorch(tmp_path, name, hw):
    model, path = exported(tmp_path, name, hw)
    x = np.random.default_rng(3).standard_normal((2, 3, hw, hw), dtype=np.float32)
    with torch.no_grad():
        ref = model(torch.as_tensor(x)).numpy().astype(np.float64)
    lab = labkit.import_onnx(path)
    got = to_numpy(lab(labkit.xp.asarray(x))).astype(np.float64)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    assert (got.argmax(1) == ref.argmax(1)).all()
    # Every ReLU (ReLU6) runs in the epilogue of the step before it: a conv, a batch norm, an add.
    ops = [r["op"] for r in lab.describe(2)]
    assert "Relu" not in ops and "Clip" not in ops, ops
