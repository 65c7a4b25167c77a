"""A small CNN whose adaptive average pools torch.onnx's dynamo exporter cannot write as AveragePool, for
tests/test_onnx_plane_map.py.

    python export.py        # needs torch, onnx and onnxscript; writes dynamo18.onnx and logits.npy here

Two heads on a 12x12 image: the features' 3x3 map pooled to 5x5 (windows of 1 or 2 rows and columns,
overlapping unevenly: the exporter writes a GatherND of padded windows, a Where that zeroes the padding,
Gathers, Adds and a Div), and a global max of it (1x1) pooled to 2x2 (each window one pixel: a GatherND
and a ReduceMean); both flattened, concatenated and classified.  Random weights (seed 0).  logits.npy:
PyTorch's float32 logits of the 3 images np.random.default_rng(0).standard_normal((3, 3, 12, 12)) (the
test makes the same ones).
"""
import numpy as np, torch
from torch import nn

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.up_uneven = nn.AdaptiveAvgPool2d((5, 5))
        self.up_even = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Linear(8 * 25 + 8 * 4, 10)
    def forward(self, x):
        f = self.features(x)                                   # (N, 8, 3, 3)
        a = self.up_uneven(f).flatten(1)
        b = self.up_even(torch.amax(f, dim=(2, 3), keepdim=True)).flatten(1)
        return self.classifier(torch.cat([a, b], 1))

torch.manual_seed(0)
m = TwoHeads().eval()
x = torch.from_numpy(np.random.default_rng(0).standard_normal((3, 3, 12, 12)).astype(np.float32))
torch.onnx.export(m, (x[:2],), "dynamo18.onnx", dynamo=True, input_names=["x"], output_names=["y"],
                  dynamic_shapes={"x": {0: torch.export.Dim("N", min=1, max=4096)}}, external_data=False)
with torch.no_grad():
    np.save("logits.npy", m(x).numpy())
import onnx
print(sorted({n.op_type for n in onnx.load("dynamo18.onnx").graph.node}))
