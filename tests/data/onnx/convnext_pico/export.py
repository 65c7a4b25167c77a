"""A small ConvNeXt in PyTorch, exported as torch.onnx.export writes it, for tests/test_onnx_convnext.py.

    python export.py        # needs torch, onnx and onnxscript; writes opset17.onnx, opset20.onnx,
                            # dynamo18.onnx and logits.npy here

The blocks are torchvision's ConvNeXt's (CNBlock: a 7x7 depthwise convolution, channels-last
LayerNorm, Linear, GELU, Linear, back to NCHW, the layer scale, the skip; LayerNorm2d; the stem and
the downsampling convolutions; the head), with widths 16-32-64 and depths 1-2-1 so that the CPU
executor runs it in seconds.  Random weights (seed 0); the layer scale and the norms' parameters made
large enough that every op matters.  The TorchScript exporter at opset 17 writes GELU as Div, Erf,
Add, Mul, Mul; at opset 20 as one Gelu node.  dynamo18.onnx: the same model through torch.onnx's
dynamo exporter (the default in current PyTorch; opset 18), which writes the head's LayerNorm2d on a
1x1 map as an as_strided view: a Gather at indices computed from the batch size.  logits.npy: PyTorch's float32 logits of the 3 images
np.random.default_rng(0).standard_normal((3, 3, 64, 64)) (the test makes the same ones).
"""
import numpy as np, torch
from torch import nn
import torch.nn.functional as F

class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)

class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__(); self.dims = dims
    def forward(self, x):
        return torch.permute(x, self.dims)

class CNBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), Permute([0, 2, 3, 1]),
                                   nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
                                   nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.randn(dim, 1, 1) * 0.5)
    def forward(self, x):
        return self.layer_scale * self.block(x) + x

class ConvNeXtPico(nn.Module):
    def __init__(self, dims=(16, 32, 64), depths=(1, 2, 1), classes=10):
        super().__init__()
        layers = [nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6))]
        for i, (d, n) in enumerate(zip(dims, depths)):
            layers += [CNBlock(d) for _ in range(n)]
            if i + 1 < len(dims):
                layers.append(nn.Sequential(LayerNorm2d(d, eps=1e-6), nn.Conv2d(d, dims[i + 1], 2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1), nn.Linear(dims[-1], classes))
    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))

torch.manual_seed(0)
m = ConvNeXtPico().eval()
with torch.no_grad():
    for p in m.parameters():
        if p.dim() == 1: p.add_(torch.randn_like(p) * 0.1)
x = torch.from_numpy(np.random.default_rng(0).standard_normal((3, 3, 64, 64)).astype(np.float32))
for opset in (17, 20):
    torch.onnx.export(m, (x[:1],), f"opset{opset}.onnx", dynamo=False, opset_version=opset,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
# traced at batch 2: the dynamo exporter would take a traced batch of 1 as a fixed size
torch.onnx.export(m, (x[:2],), "dynamo18.onnx", dynamo=True, input_names=["x"], output_names=["y"],
                  dynamic_shapes={"x": {0: torch.export.Dim("N", min=1, max=4096)}})
with torch.no_grad():
    np.save("logits.npy", m(x).numpy())
import onnx
for name in ("opset17", "opset20", "dynamo18"):
    try:
        g = onnx.load(f"{name}.onnx").graph
        print(name, sorted({n.op_type for n in g.node}))
    except Exception as e:
        print(e)
