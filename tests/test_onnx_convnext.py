"""A ConvNeXt exported by PyTorch (tests/data/onnx/convnext_pico: torchvision's blocks at small widths,
torch.onnx.export at opsets 17 and 20, and its dynamo exporter at 18), imported and run by labkit,
against the logits PyTorch computed for the same images when the files were written: LayerNormalization
on channels-last pixels, MatMul of rank-4 activations, GELU as Erf's decomposition (opset 17) and as
Gelu (opset 20), the layer scale; the dynamo file's weights in an external data file beside it, and its
head's as_strided view (a Gather at indices computed from the batch size)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy

pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the 'reference' extra)")

DATA = Path(__file__).resolve().parent / "data" / "onnx" / "convnext_pico"


@pytest.mark.parametrize("name", ["opset17", "opset20", "dynamo18"])
def test_pytorchs_convnext_runs_as_pytorch_does(name):
    x = np.random.default_rng(0).standard_normal((3, 3, 64, 64)).astype(np.float32)
    want = np.load(DATA / "logits.npy")
    model = labkit.import_onnx(DATA / f"{name}.onnx")
    for got in (to_numpy(model(labkit.xp.asarray(x))), None):
        if got is None:                                   # the same through the plan (a CUDA graph on a GPU)
            plan = model.plan(3)
            plan.x[...] = labkit.xp.asarray(x)
            got = to_numpy(plan.run())
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
        assert (got.argmax(1) == want.argmax(1)).all()
    ops = {r["op"] for r in model.describe(3)}
    if name == "dynamo18":
        assert "Gather" in ops and "LayerNormalization" in ops, ops
        return
    # each block's GELU in its first Linear's epilogue, its layer scale folded into the second's weights,
    # its skip added in the copy back to NCHW: no pass of their own
    gelu = "MatMul+Add+Gelu" if name == "opset20" else "MatMul+Add+Div+Erf+Add+Mul+Mul"
    assert {"LayerNormalization", gelu, "MatMul+Add+Mul", "Transpose+Add"} <= ops, ops
    assert not ops & {"Mul", "Add", "Gelu", "Div+Erf+Add+Mul+Mul"}, ops
