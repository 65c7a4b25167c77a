"""torchvision's CNNs exported by torch.onnx.export and run by labkit.import_onnx, against PyTorch on
the same images (small planes: the CPU executor is slow).  Skipped where torch or torchvision is not
installed; benchmarks/onnx_torchvision.py does the same at 224 x 224 on a GPU, and times it."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy

torch = pytest.importorskip("torch", reason="exporting torchvision's networks needs PyTorch")
torchvision = pytest.importorskip("torchvision", reason="the networks are torchvision's")
pytest.importorskip("onnx", reason="the importer needs the onnx package")


def exported(tmp_path, name: str, hw: int):
    """(torch model, ONNX path): seeded random weights, batch-norm statistics randomized too (so that
    folding them is tested), exported at batch 1 with a dynamic batch axis."""
    torch.manual_seed(0)
    kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **kw).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
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
