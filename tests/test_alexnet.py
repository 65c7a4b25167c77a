"""AlexNet: the safe weight reader, the re-layout, the input pipeline, LRN, and the whole network on
the backend against the float64 reference and against TensorFlow."""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit import layers, reference
from labkit.checks import rel_error, to_numpy
from labkit.models import alexnet
from labkit.models import alexnet_weights as aw
from labkit.ops import lrn as lrn_ops


rng = np.random.default_rng()
REAL_FRAGMENT = Path(__file__).resolve().parent.parent / "data" / "alexnet" / "bvlc_alexnet_real_first128KiB.npy"


def write_npy_pickle(path: Path, obj, protocol: int = 2) -> None:
    """A .npy of a 0-d object array holding ``obj``, pickled as the real file is (protocol 2)."""
    arr = np.empty((), dtype=object)
    arr[()] = obj
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump(arr, f, protocol=protocol)


@pytest.mark.check
def test_the_real_truncated_file_is_refused_as_truncated():
    with pytest.raises(aw.WeightFileError, match=r"incomplete or corrupt.*131,072 bytes.*243,861,814: it is truncated"):
        aw.read_bvlc_npy(REAL_FRAGMENT)


class _RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_runs_a_command_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "hostile.npy"
    write_npy_pickle(path, {"conv1": [_RunsACommand(marker), np.zeros(96, np.float32)]})
    with pytest.raises(aw.WeightFileError, match=r"asks for (posix|os|nt)\.system.*refused"):
        aw.read_bvlc_npy(path)
    assert not marker.exists()
    # the usual loader would have run it: the test's pickle is really hostile
    np.load(path, allow_pickle=True)
    assert marker.exists()


def test_any_other_class_is_refused(tmp_path):
    path = tmp_path / "eval.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": ()})
        f.write(b"\x80\x02cbuiltins\neval\nq\x00X\x04\x00\x00\x001+1q\x01\x85q\x02Rq\x03.")
    with pytest.raises(aw.WeightFileError, match=r"builtins\.eval.*refused"):
        aw.read_bvlc_npy(path)


def tiny(shape_overrides=None):
    d = {k: [np.zeros(ws, np.float32) if k.startswith("conv") else np.zeros((2, 2), np.float32),
             np.zeros(bs, np.float32)] for k, (ws, bs) in aw.FILE_SHAPES.items()}
    d.update(shape_overrides or {})
    return d


@pytest.mark.parametrize("obj, match", [
    ({"conv1": [np.zeros((11, 11, 3, 96), np.float32), np.zeros(96, np.float32)]}, r"layers \['conv1'\], expected"),
    (tiny({"conv1": [np.zeros((11, 11, 96, 3), np.float32), np.zeros(96, np.float32)]}),
     r"conv1 W has shape \(11, 11, 96, 3\), expected \(11, 11, 3, 96\)"),
    (tiny({"conv2": [np.zeros((5, 5, 48, 256), np.float64), np.zeros(256, np.float32)]}), "conv2 W must be a float32"),
    (tiny({"conv3": "not a pair"}), "conv3 must be \\[W, b\\]"),
    ([1, 2, 3], "expected a dict of layers, got list"),
])
def test_wrong_contents_are_refused(tmp_path, obj, match):
    path = tmp_path / "bad.npy"
    write_npy_pickle(path, obj)
    with pytest.raises(aw.WeightFileError, match=match):
        aw.read_bvlc_npy(path)


def test_not_an_object_npy_is_refused(tmp_path):
    path = tmp_path / "plain.npy"
    np.save(path, np.zeros(3, np.float32))
    with pytest.raises(aw.WeightFileError, match="expected a 0-d object array"):
        aw.read_bvlc_npy(path)
    with pytest.raises(aw.WeightFileError, match="no such file.*LABKIT_ALEXNET_WEIGHTS"):
        aw.read_bvlc_npy(tmp_path / "missing.npy")


def test_a_well_formed_file_reads_back_exactly(tmp_path):
    raw = aw.synthetic_weights(seed=7)
    path = tmp_path / "bvlc_alexnet.npy"
    write_npy_pickle(path, {k: [w, b] for k, (w, b) in raw.items()})
    back = aw.read_bvlc_npy(path)
    assert all(np.array_equal(back[k][0], raw[k][0]) and np.array_equal(back[k][1], raw[k][1]) for k in raw)
    w, source = alexnet.load_weights(path)
    assert str(path) in source and w["conv2_w"].shape == (256, 48, 5, 5)


@pytest.mark.check
def test_relayout():
    raw = aw.synthetic_weights()
    w = aw.to_labkit(raw)
    # conv: (kh, kw, cin, cout) -> (cout, cin, kh, kw)
    assert w["conv4_w"].shape == (384, 192, 3, 3) and w["conv4_w"][5, 7, 1, 2] == raw["conv4"][0][1, 2, 7, 5]
    # fc6: row (h*6 + w)*256 + c of the file is row c*36 + h*6 + w
    h, wd, c = 4, 1, 200
    assert np.array_equal(w["fc6_w"][c * 36 + h * 6 + wd], raw["fc6"][0][(h * 6 + wd) * 256 + c])
    assert sum(v.size for v in w.values()) == 60_965_224       # the data README's parameter count


@pytest.mark.check
def test_input_pipeline_and_classes():
    rgb, names = alexnet.load_photos()
    assert rgb.shape == (5, 227, 227, 3) and rgb.dtype == np.uint8 and "chelsea.png" in names
    flat = np.zeros((1, 227, 227, 3), np.uint8)
    flat[..., 0], flat[..., 1], flat[..., 2] = 200, 100, 50          # R, G, B
    x = alexnet.preprocess(flat)
    assert x.shape == (1, 3, 227, 227) and x.dtype == np.float32
    assert np.allclose(x[0, :, 0, 0], [50 - 103.939, 100 - 116.779, 200 - 123.68], atol=1e-4)   # B, G, R
    with pytest.raises(ValueError, match=r"\(N, 227, 227, 3\)"):
        alexnet.preprocess(np.zeros((1, 3, 227, 227)))
    names = alexnet.class_names()
    assert len(names) == 1000 and names[0] == "tench" and names[281] == "tabby"


@pytest.mark.check
@pytest.mark.parametrize("shape, r", [((2, 7, 5, 3), 2), ((1, 96, 11, 13), 2), ((3, 4, 2, 2), 5), ((1, 3, 4, 4), 0),
                                      ((2, 7, 23, 19), 3)])
def test_lrn_matches_reference(shape, r):
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    out = labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)
    y = layers.lrn(labkit.xp.asarray(x), r, 1.0, 1e-3, 0.75, out=out)
    assert y is out and rel_error(y, reference.lrn(x, r, 1.0, 1e-3, 0.75)) < 1e-5
    with pytest.raises(ValueError, match="bias must be > 0"):
        layers.lrn(labkit.xp.asarray(x), r, bias=0.0)


@pytest.mark.parametrize("beta", [0.5, 1.0, 0.7499])
def test_lrn_matches_reference_at_other_betas(beta):
    """beta = 0.75 takes reciprocal square roots; every other beta powf."""
    x = (rng.standard_normal((2, 9, 17, 18)) * 30).astype(np.float32)
    y = layers.lrn(labkit.xp.asarray(x), 2, 2.0, 1e-3, beta)
    assert rel_error(y, reference.lrn(x, 2, 2.0, 1e-3, beta)) < 1e-5


def test_a_nan_in_lrn_reaches_exactly_its_window():
    x = rng.standard_normal((1, 9, 5, 6)).astype(np.float32)
    x[0, 4, 2, 3] = np.nan
    y = to_numpy(layers.lrn(labkit.xp.asarray(x), 2, 1.0, 1e-3, 0.75))
    ref = reference.lrn(x, 2, 1.0, 1e-3, 0.75)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    assert np.isnan(ref).sum() == 5


@pytest.fixture(scope="module")
def synthetic():
    raw = aw.synthetic_weights()
    return raw, aw.to_labkit(raw), alexnet.AlexNet(aw.to_labkit(raw))


def test_network_matches_reference_at_batch_1(synthetic):
    _raw, w, net = synthetic
    x = alexnet.preprocess(alexnet.load_photos(["coffee.png"])[0])
    ref = reference.softmax(alexnet.reference_logits(w, x))
    p = net(labkit.xp.asarray(x))
    assert rel_error(p, ref) < 1e-5 and abs(float(to_numpy(p).sum()) - 1.0) < 1e-5
    with pytest.raises(ValueError, match=r"x must be \(N, 3, 227, 227\)"):
        net(labkit.xp.zeros((1, 3, 224, 224), dtype=labkit.xp.float32))
    # LRN and pooling as two kernels each time: the same sums in the same order, the same probabilities
    apart = alexnet.AlexNet(w, fuse_lrn_pool=False)
    assert [name for name, _ in apart.plan(1).steps][:3] == ["conv1", "lrn1", "pool1"]
    np.testing.assert_array_equal(to_numpy(apart(labkit.xp.asarray(x))), to_numpy(net(labkit.xp.asarray(x))))


@pytest.mark.check
def test_network_agrees_with_tensorflow_at_batch_2(synthetic):
    pytest.importorskip("tensorflow", reason="TensorFlow (the reference extra) is the oracle of this test")
    from labkit.models import alexnet_tf
    raw, _w, net = synthetic
    x = alexnet.preprocess(alexnet.load_photos(["astronaut.png", "rocket.jpg"])[0])
    tf_logits = alexnet_tf.tensorflow_logits(raw, x)       # the file's layouts, TensorFlow's code
    assert rel_error(net.logits(labkit.xp.asarray(x)), tf_logits.astype(np.float64)) < 1e-4


@pytest.mark.check
def test_breakdown_memory_and_first_call_on_the_backend(synthetic):
    from labkit.models import alexnet_bench as ab
    _raw, w, net = synthetic
    bd = ab.forward_breakdown(net, 1, warmup=0, repeat=1)
    names, mem_kind = [p.name for p in bd.parts], bd.meta["host_memory"]   # pinned on a GPU, else pageable
    assert names[0].endswith(f"x ({mem_kind})") and names[-1].endswith(f"probabilities ({mem_kind})")
    assert names[1:-1] == ["conv1", "lrn1 + pool1", "conv2", "lrn2 + pool2", "conv3", "conv4", "conv5", "pool5",
                           "fc6", "fc7", "fc8", "softmax"]
    assert all(p.median_ms > 0 for p in bd.parts) and bd.whole_ms >= bd.op_ms * 0.5
    mem = {r["component"]: r for r in ab.memory(net, 2)}
    assert mem["conv1"]["activations"] == 2 * 96 * 55 * 55 * 4 and mem["pool5"]["activations"] == 2 * 9216 * 4
    assert mem["fc6"]["weights"] == (9216 * 4096 + 4096) * 4
    ws = net.plan(2).workspace_bytes                  # split-K's partial products, where a layer has them
    assert all(mem[k]["workspace"] == ws.get(k, 0) for k in mem)
    for name, conv in net.convs.items():              # no column matrix: at most split-K's slices of y
        shape = conv.workspace_shape(2)
        assert mem[name]["workspace"] == (0 if shape is None else 4 * int(np.prod(shape)))
        assert shape is None or shape[1:] == (2, conv.layer.M) + conv.layer.out_hw
    fc = ab.first_call(w, 1)
    assert set(fc) == {"prepare network (weights, modules)", "allocate activations", "first forward",
                       "second forward", "free activations"} and all(v >= 0 for v in fc.values())


@pytest.mark.check
def test_plan_run_and_workspace(synthetic):
    _raw, w, net = synthetic
    x = alexnet.preprocess(alexnet.load_photos(["coffee.png"])[0])
    plan = net.plan(1)
    plan.x[...] = labkit.xp.asarray(x)
    plan.buffers["softmax"][...] = float("nan")
    plan.run()                       # a CUDA graph on a GPU, the steps on the CPU executor
    plan.run()
    assert rel_error(plan.buffers["softmax"], reference.softmax(alexnet.reference_logits(w, x))) < 1e-5
    if labkit.backend() == "cuda":   # split-K's partial products live in the plan, not in the calls
        assert plan.workspace["fc6"] is not None and plan.workspace_bytes["fc6"] > 0


@pytest.mark.check
def test_auto_convolutions_are_the_same_network(synthetic):
    """convs="auto": each convolution on labkit.conv2d's auto choice (on a GPU the autotuner's, e.g.
    Winograd as GEMMs on conv2-conv5), eager and as the plan, against the float64 reference; refused
    with TF32, and an unknown choice refused by name."""
    _raw, w, _net = synthetic
    net = alexnet.AlexNet(w, convs="auto")
    assert all(type(c).__name__ == "AutoConv2d" for c in net.convs.values())
    x = alexnet.preprocess(alexnet.load_photos(["coffee.png", "rocket.jpg"])[0])
    ref = reference.softmax(alexnet.reference_logits(w, x))
    assert rel_error(net(labkit.xp.asarray(x)), ref) < 1e-5
    plan = net.plan(x.shape[0])
    plan.x[...] = labkit.xp.asarray(x)
    plan.buffers["softmax"][...] = float("nan")
    plan.run()
    assert rel_error(plan.buffers["softmax"], ref) < 1e-5
    if labkit.backend() == "cpu":        # untuned: the implicit GEMM with its default tiles
        assert all(c.choice(x.shape[0])["family"] == "implicit" for c in net.convs.values())
    assert net.replica().conv_kernels == "auto"
    with pytest.raises(ValueError, match="use precision='fp32'"):
        alexnet.AlexNet(w, precision="tf32", convs="auto")
    with pytest.raises(ValueError, match="convs must be one of"):
        alexnet.AlexNet(w, convs="winograd")


@pytest.mark.gpu     # TF32 runs on the tensor cores
def test_tf32_network_takes_the_dense_layers_to_the_tensor_cores_from_its_threshold(synthetic):
    _raw, w, net = synthetic
    tf32 = alexnet.AlexNet(w, precision="tf32")
    N = alexnet.TF32_DENSE_ROWS
    assert all(type(fc).__name__ == "Dense" for fc in tf32.dense_layers(N - 1).values())
    assert all(type(fc).__name__ == "DenseTF32" for fc in tf32.dense_layers(N).values())
    x = labkit.xp.asarray((50 * np.random.default_rng(7).standard_normal((N,) + alexnet.INPUT_SHAPE)).astype(np.float32))
    ref = to_numpy(net.logits(x)).astype(np.float64)           # FP32, checked against float64 above
    plan = tf32.plan(N)
    plan.x[...] = x
    plan.buffers["fc8"][...] = float("nan")
    plan.run()
    err = rel_error(plan.buffers["fc8"], ref)
    assert 1e-6 < err < 1e-2                                   # TF32's rounding through eight layers, no more


@pytest.mark.gpu
def test_pytorch_peer_eager_and_as_a_graph_is_the_same_network(synthetic):
    from labkit import peers
    why = peers.cudnn_available()
    if why is not None:
        pytest.skip(f"the PyTorch peer runs on a GPU only: {why}")
    import torch
    _raw, w, _net = synthetic
    x = alexnet.preprocess(alexnet.load_photos(["coffee.png", "rocket.jpg"])[0])
    ref = reference.softmax(alexnet.reference_logits(w, x))
    eager = peers.torch_alexnet(w)(labkit.xp.asarray(x))
    replay = peers.torch_alexnet_graph(w, 2)
    replay.x.copy_(torch.as_tensor(x, device="cuda"))
    graph = replay()
    assert rel_error(labkit.xp.asarray(eager), ref) < 1e-4 and rel_error(labkit.xp.asarray(graph), ref) < 1e-4


class _CallsNdarray:
    """Pickles as numpy.ndarray((count,), 'O'): a few bytes that declare `count` objects."""

    def __init__(self, count):
        self.count = count

    def __reduce__(self):
        return (np.ndarray, ((self.count,), "O"))


@pytest.mark.parametrize("count", [5 * 10**7, 5 * 10**8, 10**13])
def test_an_array_the_pickle_builds_itself_is_refused_before_it_is_allocated(tmp_path, count):
    """A 160-byte file whose pickle calls numpy.ndarray((n,), 'O') must not allocate n objects (419 MB
    for 5e7, 3.95 GB for 5e8, a raw MemoryError for 1e13) before it is refused."""
    import tracemalloc
    path = tmp_path / "declares.npy"
    write_npy_pickle(path, {"conv1": [_CallsNdarray(count), _CallsNdarray(count)]})
    assert path.stat().st_size < 400
    tracemalloc.start()
    try:
        with pytest.raises(aw.WeightFileError, match=r"calls numpy\.ndarray\(\.\.\.\) itself.*refused before allocating"):
            aw.read_bvlc_npy(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20, f"{peak:,} bytes allocated while refusing"


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("shape,r", [((2, 7, 5, 3), 2), ((1, 9, 3, 4), 1), ((3, 1, 2, 3), 2), ((1, 5, 3, 3), 0),
                                     ((2, 6, 1, 5), 3)])
def test_lrn_kernel_at_every_chunk_of_channels(shape, r, chunk):
    """The kernel itself at chunks the op may not pick: windows across a chunk's edges, C not a multiple
    of the chunk, fewer channels than the window; every output written (NaN-poisoned), no read outside x."""
    from labkit.loader import load
    N, C, H, W = shape
    x = rng.standard_normal(shape).astype(np.float32) * 3
    y = labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)
    fn = load("lrn", defines={"LRN_R": r}, check="memory").get_function("lrn_across_channels")
    fn(((H * W + 255) // 256, -(-C // chunk), N), (256,),
       (labkit.xp.asarray(x), y, np.int32(N), np.int32(C), np.int32(H * W), np.int32(chunk), np.float32(1.0),
        np.float32(1e-2), np.float32(0.75)))
    assert rel_error(y, reference.lrn(x, r, 1.0, 1e-2, 0.75)) < 1e-5


def test_lrn_channel_chunk_keeps_the_gpu_full():
    assert lrn_ops.channel_chunk(1024, 96, 55 * 55, 132) == 4
    assert lrn_ops.channel_chunk(64, 96, 55 * 55, 132) == 4
    assert lrn_ops.channel_chunk(1, 96, 55 * 55, 132) == 2
