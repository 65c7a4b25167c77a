"""The MobileNetV2 ONNX reader: initializers only, every name, shape and dtype checked, external data
kept inside the file's folder, truncated, oversized and hostile files refused with a clear error."""
from __future__ import annotations

import os

import numpy as np
import pytest

from labkit.models import mobilenet_v2 as mb
from labkit.models.mobilenet_v2_weights import ONNX_ENV, WeightFileError, load_weights, read_onnx_weights

onnx = pytest.importorskip("onnx", reason="the ONNX reader needs the onnx package (the 'reference' extra)")
from onnx import helper, numpy_helper  # noqa: E402


@pytest.fixture(scope="module")
def weights():
    return mb.synthetic_weights()


def model_of(tensors: dict[str, np.ndarray]):
    """A model whose graph stores ``tensors`` as initializers (and one node, which the reader must ignore)."""
    inits = [numpy_helper.from_array(v, name=k) for k, v in tensors.items()]
    node = helper.make_node("Identity", ["features.0.0.weight"], ["out"])
    graph = helper.make_graph([node], "mobilenet_v2", [], [helper.make_tensor_value_info("out", 1, None)],
                              initializer=inits)
    return helper.make_model(graph)


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory, weights):
    p = tmp_path_factory.mktemp("onnx") / "mobilenet_v2.onnx"
    onnx.save_model(model_of(weights), str(p))
    return p


@pytest.mark.check
def test_reads_every_parameter(onnx_file, weights):
    got = read_onnx_weights(onnx_file)
    assert set(got) == set(weights)
    assert all(got[k].dtype == np.float32 and np.array_equal(got[k], weights[k]) for k in weights)
    assert got["features.0.0.weight"].flags.writeable


def test_external_data_inside_the_folder(tmp_path, weights):
    p = tmp_path / "m.onnx"
    onnx.save_model(model_of(weights), str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.weights", size_threshold=0)
    assert (tmp_path / "m.weights").is_file()
    got = read_onnx_weights(p)
    assert np.array_equal(got["classifier.1.weight"], weights["classifier.1.weight"])


def _external(tmp_path, weights, location: str, **fields):
    model = model_of(weights)
    t = next(t for t in model.graph.initializer if t.name == "features.0.0.weight")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in {"location": location, **fields}.items():
        e = t.external_data.add()
        e.key, e.value = k, str(v)
    p = tmp_path / "ext.onnx"
    onnx.save_model(model, str(p))
    return p


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../outside.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, weights, location):
    (tmp_path.parent / "outside.bin").write_bytes(bytes(4 * 864))
    with pytest.raises(WeightFileError, match="inside the ONNX file's folder|outside the ONNX file's folder"):
        read_onnx_weights(_external(tmp_path, weights, location))


def test_a_link_out_of_the_folder_is_refused(tmp_path, weights):
    outside = tmp_path.parent / "target.bin"
    outside.write_bytes(bytes(4 * 864))
    (tmp_path / "link.bin").symlink_to(outside)
    with pytest.raises(WeightFileError, match="resolves outside"):
        read_onnx_weights(_external(tmp_path, weights, "link.bin"))


def test_external_data_past_the_end_is_refused(tmp_path, weights):
    (tmp_path / "w.bin").write_bytes(bytes(100))
    with pytest.raises(WeightFileError, match="offset 0, length 3456 in a 100-byte file"):
        read_onnx_weights(_external(tmp_path, weights, "w.bin", offset=0, length=3456))


def test_truncated_and_empty_files_are_refused(tmp_path, onnx_file):
    data = onnx_file.read_bytes()
    for name, blob in (("cut.onnx", data[: len(data) // 2]), ("empty.onnx", b""), ("text.onnx", b"not a model\n" * 9)):
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(WeightFileError):
            read_onnx_weights(p)


def test_an_oversized_file_is_refused_before_it_is_read(onnx_file):
    with pytest.raises(WeightFileError, match="refused before reading it"):
        read_onnx_weights(onnx_file, max_bytes=1 << 20)


def test_names_shapes_dtypes_and_values_are_checked(tmp_path, weights):
    def fails(tensors, match):
        p = tmp_path / "bad.onnx"
        onnx.save_model(model_of(tensors), str(p))
        with pytest.raises(WeightFileError, match=match):
            read_onnx_weights(p)

    renamed = dict(weights)
    renamed["onnx::Conv_538"] = renamed.pop("features.3.conv.0.0.weight")
    fails(renamed, "folded BN away")
    fails({k: v for k, v in weights.items() if k != "features.7.conv.1.1.running_var"}, "missing")
    fails({**weights, "features.0.0.weight": weights["features.0.0.weight"][:, :2]}, r"shape \(32, 2, 3, 3\)")
    fails({**weights, "classifier.1.bias": weights["classifier.1.bias"].astype(np.float64)}, "DOUBLE, expected FLOAT")
    bad = weights["features.18.1.weight"].copy()
    bad[7] = np.inf
    fails({**weights, "features.18.1.weight": bad}, "NaN or infinity")


@pytest.mark.check
def test_load_weights_says_where_they_came_from(monkeypatch, onnx_file, weights):
    monkeypatch.delenv(ONNX_ENV, raising=False)
    w, source = load_weights()
    assert source.startswith("synthetic") and np.array_equal(w["classifier.1.bias"], weights["classifier.1.bias"])
    monkeypatch.setenv(ONNX_ENV, os.fspath(onnx_file))
    w, source = load_weights()
    assert str(onnx_file) in source and np.array_equal(w["features.0.0.weight"], weights["features.0.0.weight"])


def test_a_name_stored_40000_times_is_refused_in_one_pass(tmp_path):
    """A 1.3 MB file with 40,000 copies of one parameter's name: the duplicate check counts the names
    once (it compared every name with every other: 62 s to refuse).  The bound below only tells a
    pass over the names from a quadratic one on any machine."""
    import time
    t = numpy_helper.from_array(np.zeros(1, np.float32), name="features.0.0.weight")
    graph = helper.make_graph([], "mobilenet_v2", [], [], initializer=[t] * 40_000)
    p = tmp_path / "repeated.onnx"
    onnx.save_model(helper.make_model(graph), str(p))
    start = time.perf_counter()
    with pytest.raises(WeightFileError, match=r"initializers stored twice: \['features\.0\.0\.weight'\]"):
        read_onnx_weights(p)
    assert time.perf_counter() - start < 10.0
