"""labkit.models.resnet18_onnx (a ResNet-18-shaped ONNX file written with onnx.helper, no PyTorch) through
labkit.import_onnx against its float64 reference; OnnxModel.step and OnnxModel.replace: one step run by a
function of one's own, eager and in a plan, shown by describe(), undone by restore(); bad names and
functions refused before anything runs."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy
from labkit.models import resnet18_onnx as r18

onnx = pytest.importorskip("onnx", reason="writing and importing ONNX files needs the onnx package (the 'reference' extra)")

WIDTH, CLASSES, HW = 8, 12, 32
rng = np.random.default_rng(13)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    weights = r18.synthetic_weights(WIDTH, CLASSES, seed=3)
    path = r18.write(tmp_path_factory.mktemp("r18") / "resnet18.onnx", weights, hw=HW)
    return weights, path


def rel(got, ref):
    return float(np.abs(np.asarray(got, dtype=np.float64) - ref).max() / np.abs(ref).max())


def test_the_file_has_resnet18s_nodes_and_torchvisions_names(net):
    weights, path = net
    model = onnx.load(str(path))
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "Add": 8, "MaxPool": 1, "GlobalAveragePool": 1,
                   "Flatten": 1, "Gemm": 1}
    assert {i.name for i in model.graph.initializer} == set(r18.parameter_shapes(WIDTH, CLASSES)) == set(weights)
    assert r18.parameter_shapes()["layer4.1.conv2.weight"] == (512, 512, 3, 3)        # resnet18's own at width 64
    # torchvision's resnet18 has 11,689,512 parameters; BN's running statistics are buffers beside them.
    shapes = r18.parameter_shapes()
    assert sum(int(np.prod(s)) for k, s in shapes.items() if "running" not in k) == 11_689_512


def test_imported_equals_the_float64_reference_eager_and_planned(net):
    weights, path = net
    model = labkit.import_onnx(path)
    x = rng.standard_normal((3, 3, HW, HW)).astype(np.float32)
    ref = r18.reference_logits(weights, x)
    assert ref.shape == (3, CLASSES)
    assert rel(to_numpy(model(labkit.xp.asarray(x))), ref) < 1e-4
    p = model.plan(3)
    p.x[...] = labkit.xp.asarray(x)
    assert rel(to_numpy(p.run()), ref) < 1e-4
    ops = [row["op"] for row in model.describe(3)]
    # 69 nodes, 24 steps: every BN folded, every skip and its ReLU in a convolution's epilogue.
    assert len(ops) == 24 and Counter(ops) == {"Conv+BatchNormalization+Add+Relu": 8, "Conv+BatchNormalization+Relu": 9,
                                               "Conv+BatchNormalization": 3, "MaxPool": 1, "GlobalAveragePool": 1,
                                               "Flatten": 1, "Gemm": 1}


def test_the_reference_is_the_graph_written_out(net):
    # Its first layers against labkit.reference directly: conv, BN from the running statistics, ReLU.
    weights, _ = net
    x = rng.standard_normal((1, 3, HW, HW))
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    h = labkit.reference.conv2d(x, w["conv1.weight"], stride=2, pad=3)
    s = w["bn1.weight"] / np.sqrt(w["bn1.running_var"] + r18.BN_EPS)
    h = np.maximum((h - w["bn1.running_mean"][:, None, None]) * s[:, None, None] + w["bn1.bias"][:, None, None], 0)
    assert h.shape == (1, WIDTH, HW // 2, HW // 2)
    bad = dict(weights)
    bad.pop("layer2.0.downsample.0.weight")
    with pytest.raises(ValueError, match="downsample"):
        r18.reference_logits(bad, x)


def test_step_gives_the_folded_weights_and_the_geometry(net):
    weights, path = net
    model = labkit.import_onnx(path)
    st = model.step("layer2.0.conv2", N=2)
    assert st.op == "Conv+BatchNormalization+Add+Relu" and st.residual and st.activation == "relu"
    assert st.nodes == ("layer2.0.conv2", "layer2.0.bn2", "layer2.0.add", "layer2.0.relu_1")
    assert st.input_shapes == ((2, 2 * WIDTH, HW // 8, HW // 8),) * 2 and st.output_shape == (2, 2 * WIDTH, HW // 8, HW // 8)
    assert st.stride == (1, 1) and st.pads == (1, 1, 1, 1) and st.dilation == (1, 1) and st.groups == 1
    g, beta, mean, var = (weights[f"layer2.0.bn2.{p}"].astype(np.float64)
                          for p in ("weight", "bias", "running_mean", "running_var"))
    scale = g / np.sqrt(var + r18.BN_EPS)
    np.testing.assert_allclose(st.weight, weights["layer2.0.conv2.weight"] * scale[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(st.bias, beta - mean * scale, rtol=1e-6, atol=1e-7)
    down = model.step("layer2.0.downsample.0")
    assert down.stride == (2, 2) and down.pads == (0, 0, 0, 0) and not down.residual and down.activation is None
    fc = model.step("fc")
    assert fc.weight.shape == (8 * WIDTH, CLASSES) and fc.bias.shape == (CLASSES,) and fc.stride is None


def test_replace_runs_a_step_with_ones_own_function_eager_and_planned(net):
    weights, path = net
    model = labkit.import_onnx(path)
    name = "layer3.0.conv2"
    st = model.step(name)
    xp = labkit.xp
    w, b = xp.asarray(st.weight), xp.asarray(st.bias)
    calls = []

    def my_conv(x, residual, out):
        calls.append(x.shape)
        y = labkit.conv2d(x, w, b, stride=st.stride, pad=st.pads[:2], variant="implicit")
        out[...] = xp.maximum(y + residual, 0)

    x = rng.standard_normal((2, 3, HW, HW)).astype(np.float32)
    ref = r18.reference_logits(weights, x)
    before = to_numpy(model(xp.asarray(x))).copy()
    model.replace(name, my_conv)
    assert model.replaced() == {name: my_conv}
    row = next(r for r in model.describe(2) if r["node"] == name)
    assert row["kernel"] == "replaced: my_conv"
    assert rel(to_numpy(model(xp.asarray(x))), ref) < 1e-4 and len(calls) == 1
    p = model.plan(2)
    p.x[...] = xp.asarray(x)
    assert rel(to_numpy(p.run()), ref) < 1e-4 and len(calls) == 2
    # A wrong replacement shows in the output: the check would catch it.
    model.replace(name, lambda x, residual, out: out.fill(0))
    assert rel(to_numpy(model(xp.asarray(x))), ref) > 1e-3
    model.restore(name)
    assert model.replaced() == {}
    assert "replaced" not in next(r for r in model.describe(2) if r["node"] == name)["kernel"]
    np.testing.assert_array_equal(to_numpy(model(xp.asarray(x))), before)
    twin_src = labkit.import_onnx(path)
    twin_src.replace(name, my_conv)
    assert twin_src.replica().replaced() == {name: my_conv}


def test_replace_refuses_what_it_cannot_do_before_anything_runs(net):
    _, path = net
    model = labkit.import_onnx(path)
    with pytest.raises(ValueError, match="fused into step 'layer1.0.conv1'"):
        model.replace("layer1.0.bn1", print)
    with pytest.raises(ValueError, match="no step named 'layer9'.*conv1"):
        model.step("layer9")
    with pytest.raises(ValueError, match="runs no kernel"):
        model.replace("flatten", print)
    with pytest.raises(TypeError, match="callable"):
        model.replace("fc", "my_kernel")
    with pytest.raises(TypeError, match="str"):
        model.step(3)
    with pytest.raises(ValueError, match="was not replaced"):
        model.restore("fc")
    assert model.replaced() == {}


def test_bad_arguments_to_the_writer_are_refused(tmp_path):
    with pytest.raises(ValueError, match="width"):
        r18.synthetic_weights(width=0)
    with pytest.raises(ValueError, match="hw"):
        r18.write(tmp_path / "r.onnx", r18.synthetic_weights(4, 3), hw=16)
    with pytest.raises(ValueError, match="torchvision's resnet18 names"):
        r18.write(tmp_path / "r.onnx", {"w": np.zeros(3)})
    assert not (tmp_path / "r.onnx").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("width", [8, 64])
def test_the_pytorch_twin_is_the_same_network(width):
    # width 64: torchvision's resnet18 with the weights loaded (where torchvision is installed);
    # width 8: the same network in torch.nn.functional.
    from labkit import peers
    why = peers.cudnn_available()
    if why is not None:
        pytest.skip(f"the PyTorch twin runs on a GPU only: {why}")
    weights = r18.synthetic_weights(width, CLASSES, seed=5)
    x = rng.standard_normal((2, 3, HW, HW)).astype(np.float32)
    twin = peers.torch_resnet18(weights)
    got = twin(labkit.xp.asarray(x)).double().cpu().numpy()
    assert rel(got, r18.reference_logits(weights, x)) < 1e-4, twin.source


@pytest.mark.gpu
def test_a_replaced_step_runs_inside_the_cuda_graph(net):
    # The replacement launches on the current stream and allocates nothing: the plan's graph replays it.
    weights, path = net
    model = labkit.import_onnx(path)
    name = "layer2.1.conv1"
    st = model.step(name, 4)
    xp = labkit.xp
    w, b = xp.asarray(st.weight), xp.asarray(st.bias)

    def my_conv(x, out):
        labkit.conv2d(x, w, b, stride=st.stride, pad=st.pads[:2], activation="relu", variant="implicit", out=out)

    model.replace(name, my_conv)
    x = rng.standard_normal((4, 3, HW, HW)).astype(np.float32)
    model(xp.asarray(x))                     # eager first: every plan of the step made outside the capture
    p = model.plan(4)
    p.x[...] = xp.asarray(x)
    p.run()
    x2 = rng.standard_normal((4, 3, HW, HW)).astype(np.float32)
    p.x[...] = xp.asarray(x2)
    assert rel(to_numpy(p.run()), r18.reference_logits(weights, x2)) < 1e-4
