"""labkit.data: the IDX reader, the Fashion-MNIST loader and the image resize.

Broken IDX files are built in ``tmp_path``; the random images are seeded
(``SEED``).  Only the resize test needs TensorFlow and is skipped, with its
reason, without it.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from labkit import data as lkdata
from labkit.data import (
    CLASS_NAMES,
    IDXFormatError,
    load_fashion_mnist,
    read_idx,
    resize_images,
)
from labkit.data import fashion_mnist as fm

SEED = 20240408
REPO_DATA = Path(__file__).resolve().parent.parent / "data" / "fashion-mnist"
CHECKSUMS = {
    "t10k-images-idx3-ubyte.gz":
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "t10k-labels-idx1-ubyte.gz":
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    "train-images-idx3-ubyte.gz":
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "train-labels-idx1-ubyte.gz":
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
}


def idx_bytes(arr: np.ndarray, type_code: int = 0x08, magic: bytes = b"\x00\x00") -> bytes:
    """Serialize a uint8 array as IDX."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    header = magic + bytes([type_code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.tobytes()


def write(path: Path, payload: bytes, gz: bool = True) -> Path:
    path.write_bytes(gzip.compress(payload) if gz else payload)
    return path


def make_split(folder: Path, n: int = 5, split: str = "test", gz: bool = True,
               labels: np.ndarray | None = None, images: np.ndarray | None = None):
    rng = np.random.default_rng(SEED)
    prefix = "t10k" if split == "test" else "train"
    folder.mkdir(parents=True, exist_ok=True)
    if images is None:
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    if labels is None:
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    suffix = ".gz" if gz else ""
    write(folder / f"{prefix}-images-idx3-ubyte{suffix}", idx_bytes(images), gz)
    write(folder / f"{prefix}-labels-idx1-ubyte{suffix}", idx_bytes(labels), gz)
    return images, labels


# --------------------------------------------------------------------------
# the shipped test split
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CHECKSUMS))
def test_shipped_files_checksum(name):
    digest = hashlib.sha256((REPO_DATA / name).read_bytes()).hexdigest()
    assert digest == CHECKSUMS[name], f"{name} differs from the official release"


def test_shipped_license_and_readme():
    assert "Zalando SE" in (REPO_DATA / "LICENSE").read_text(encoding="utf-8")
    readme = (REPO_DATA / "README.md").read_text(encoding="utf-8")
    for digest in CHECKSUMS.values():
        assert digest in readme


def test_shipped_test_set_loads(monkeypatch):
    monkeypatch.delenv(fm.ENV_VAR, raising=False)
    assert fm.REPO_DIR == REPO_DATA
    images, labels = load_fashion_mnist("test")
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10_000,) and labels.dtype == np.uint8
    assert labels.min() == 0 and labels.max() == 9
    assert np.bincount(labels).tolist() == [1000] * 10
    assert images.max() == 255 and images.min() == 0
    assert len(CLASS_NAMES) == 10


def test_shipped_training_set_loads(monkeypatch):
    monkeypatch.delenv(fm.ENV_VAR, raising=False)
    images, labels = load_fashion_mnist("train")
    assert images.shape == (60_000, 28, 28) and labels.shape == (60_000,)
    assert np.bincount(labels).tolist() == [6000] * 10
    assert CLASS_NAMES[0] == "T-shirt/top" and CLASS_NAMES[9] == "Ankle boot"


# --------------------------------------------------------------------------
# read_idx
# --------------------------------------------------------------------------
@pytest.mark.check
@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 28, 28), (2, 3, 4, 5)])
def test_read_idx_roundtrip(tmp_path, gz, shape):
    arr = np.random.default_rng(SEED).integers(0, 256, size=shape, dtype=np.uint8)
    # the name says nothing: gzip is detected from the magic bytes
    p = write(tmp_path / "file.bin", idx_bytes(arr), gz)
    out = read_idx(p)
    assert out.dtype == np.uint8 and out.shape == shape
    assert np.array_equal(out, arr)
    assert out.flags.writeable and out.flags.c_contiguous
    assert np.array_equal(read_idx(str(p)), arr)


def test_gzip_detected_by_magic_not_name(tmp_path):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    raw_named_gz = write(tmp_path / "raw.gz", idx_bytes(arr), gz=False)
    gz_named_raw = write(tmp_path / "compressed-ubyte", idx_bytes(arr), gz=True)
    assert np.array_equal(read_idx(raw_named_gz), arr)
    assert np.array_equal(read_idx(gz_named_raw), arr)


def test_idx_error_is_a_value_error():
    assert issubclass(IDXFormatError, ValueError)


@pytest.mark.check
@pytest.mark.parametrize("gz", [True, False])
def test_truncated_payload(tmp_path, gz):
    payload = idx_bytes(np.zeros((10, 28, 28), np.uint8))[:-100]
    p = write(tmp_path / "trunc", payload, gz)
    with pytest.raises(IDXFormatError, match=r"truncated payload.*7,840 bytes.*found only 7,740") as e:
        read_idx(p)
    assert str(p) in str(e.value)


def test_truncated_header(tmp_path):
    p = write(tmp_path / "hdr", idx_bytes(np.zeros((2, 3), np.uint8))[:9], gz=False)
    with pytest.raises(IDXFormatError, match=r"12-byte header.*found only 9 bytes"):
        read_idx(p)
    p = write(tmp_path / "tiny", b"\x00\x00", gz=False)
    with pytest.raises(IDXFormatError, match=r"at least 4 bytes, found only 2"):
        read_idx(p)


def test_truncated_gzip(tmp_path):
    compressed = gzip.compress(idx_bytes(np.arange(5000, dtype=np.uint32).astype(np.uint8)))
    p = tmp_path / "cut.gz"
    p.write_bytes(compressed[: len(compressed) // 2])
    with pytest.raises(IDXFormatError, match=r"could not be decompressed") as e:
        read_idx(p)
    assert str(p) in str(e.value)
    assert e.value.__cause__ is not None


def test_corrupt_gzip(tmp_path):
    compressed = bytearray(gzip.compress(idx_bytes(np.zeros(1000, np.uint8))))
    compressed[12:20] = b"\xff" * 8          # smash the deflate stream
    p = tmp_path / "bad.gz"
    p.write_bytes(bytes(compressed))
    with pytest.raises(IDXFormatError, match=r"could not be decompressed"):
        read_idx(p)


@pytest.mark.check
def test_wrong_magic(tmp_path):
    p = write(tmp_path / "magic", idx_bytes(np.zeros(4, np.uint8), magic=b"\x01\x00"))
    with pytest.raises(IDXFormatError, match=r"magic bytes 00 00.*found 01 00"):
        read_idx(p)
    p = write(tmp_path / "png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, gz=False)
    with pytest.raises(IDXFormatError, match=r"not an IDX file"):
        read_idx(p)


@pytest.mark.parametrize("code,name", [(0x09, "signed byte"), (0x0D, "float"), (0x42, "an unknown type")])
def test_wrong_type_code(tmp_path, code, name):
    p = write(tmp_path / "type", idx_bytes(np.zeros(4, np.uint8), type_code=code))
    with pytest.raises(IDXFormatError, match=rf"type code 0x08 \(unsigned byte\), found 0x{code:02x} \({name}"):
        read_idx(p)


@pytest.mark.parametrize("ndim", [0, 5])
def test_bad_rank(tmp_path, ndim):
    payload = b"\x00\x00\x08" + bytes([ndim]) + struct.pack(f">{ndim}I", *([1] * ndim)) + b"\x00"
    p = write(tmp_path / "rank", payload)
    with pytest.raises(IDXFormatError, match=rf"1 to 4 dimensions, found {ndim}"):
        read_idx(p)


def test_zero_dimension(tmp_path):
    p = write(tmp_path / "zero", b"\x00\x00\x08\x02" + struct.pack(">2I", 3, 0))
    with pytest.raises(IDXFormatError, match=r"at least 1, found sizes \(3, 0\)"):
        read_idx(p)


@pytest.mark.parametrize("gz", [True, False])
def test_trailing_bytes(tmp_path, gz):
    p = write(tmp_path / "trail", idx_bytes(np.zeros((2, 3), np.uint8)) + b"junk", gz)
    with pytest.raises(IDXFormatError, match=r"exactly 6 bytes.*found 10 \(4 trailing bytes\)"):
        read_idx(p)


def test_garbage_after_gzip_stream(tmp_path):
    p = tmp_path / "after.gz"
    p.write_bytes(gzip.compress(idx_bytes(np.zeros(3, np.uint8))) + b"\x01\x02garbage")
    with pytest.raises(IDXFormatError):
        read_idx(p)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "nope")


# --------------------------------------------------------------------------
# load_fashion_mnist: validation and search order
# --------------------------------------------------------------------------
def test_loader_count_mismatch(tmp_path):
    rng = np.random.default_rng(SEED)
    make_split(tmp_path, images=rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
               labels=np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match=r"5 images but .* 4 labels"):
        load_fashion_mnist(folder=tmp_path)


def test_loader_label_out_of_range(tmp_path):
    make_split(tmp_path, labels=np.array([0, 1, 11, 3, 4], np.uint8))
    with pytest.raises(ValueError, match=r"labels must be in 0\.\.9, found 11 at index 2"):
        load_fashion_mnist(folder=tmp_path)


def test_loader_wrong_image_shape(tmp_path):
    make_split(tmp_path, images=np.zeros((5, 32, 32), np.uint8))
    with pytest.raises(ValueError, match=r"\(N, 28, 28\), found \(5, 32, 32\)"):
        load_fashion_mnist(folder=tmp_path)


def test_loader_labels_not_1d(tmp_path):
    make_split(tmp_path, labels=np.zeros((5, 2), np.uint8))
    with pytest.raises(ValueError, match=r"labels of shape \(N,\), found \(5, 2\)"):
        load_fashion_mnist(folder=tmp_path)


def test_loader_bad_split():
    with pytest.raises(ValueError, match=r'split must be "train" or "test"'):
        load_fashion_mnist("validation")


@pytest.mark.check
@pytest.mark.parametrize("gz", [True, False])
def test_loader_raw_and_gzip_files(tmp_path, gz):
    images, labels = make_split(tmp_path, split="train", gz=gz)
    got_images, got_labels = load_fashion_mnist("train", folder=tmp_path)
    assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)


def test_search_order_env_var(tmp_path, monkeypatch):
    images, labels = make_split(tmp_path / "env", n=3)
    monkeypatch.setenv(fm.ENV_VAR, str(tmp_path / "env"))
    assert fm.search_paths()[0] == tmp_path / "env"
    got_images, got_labels = load_fashion_mnist()
    assert got_images.shape == (3, 28, 28)
    assert np.array_equal(got_labels, labels)


def test_search_order_folder_beats_env(tmp_path, monkeypatch):
    make_split(tmp_path / "env", n=3)
    make_split(tmp_path / "arg", n=4)
    monkeypatch.setenv(fm.ENV_VAR, str(tmp_path / "env"))
    assert len(load_fashion_mnist(folder=tmp_path / "arg")[0]) == 4
    assert fm.search_paths(tmp_path / "arg") == [tmp_path / "arg"]


def test_folder_argument_is_the_only_place_looked(tmp_path, monkeypatch):
    make_split(tmp_path / "env", n=3)
    monkeypatch.setenv(fm.ENV_VAR, str(tmp_path / "env"))
    with pytest.raises(FileNotFoundError) as e:
        load_fashion_mnist(folder=tmp_path / "empty")
    msg = str(e.value)
    assert str(tmp_path / "empty") in msg and "folder does not exist" in msg
    assert str(tmp_path / "env") not in msg


def test_env_var_falls_back_to_repo(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(fm.ENV_VAR, str(tmp_path / "empty"))
    assert fm.search_paths() == [tmp_path / "empty", fm.REPO_DIR, fm.SYSTEM_DIR]
    assert len(load_fashion_mnist("test")[0]) == 10_000


@pytest.mark.check
def test_not_found_lists_every_place(tmp_path, monkeypatch):
    (tmp_path / "env").mkdir()
    (tmp_path / "half").mkdir()
    make_split(tmp_path / "half", n=2, split="train")
    (tmp_path / "half" / "train-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setenv(fm.ENV_VAR, str(tmp_path / "env"))
    monkeypatch.setattr(fm, "REPO_DIR", tmp_path / "half")
    monkeypatch.setattr(fm, "SYSTEM_DIR", tmp_path / "system")
    with pytest.raises(FileNotFoundError) as e:
        load_fashion_mnist("train")
    msg = str(e.value)
    assert f"{tmp_path / 'env'}  (no files)" in msg
    assert "found train-images-idx3-ubyte.gz but not the labels file" in msg
    assert f"{tmp_path / 'system'}  (folder does not exist)" in msg
    assert "dataset-fashion-mnist" in msg and fm.ENV_VAR in msg and "folder=" in msg


@pytest.mark.check
def test_public_api_is_reexported():
    for name in lkdata.__all__:
        assert hasattr(lkdata, name)
    assert lkdata.read_idx is read_idx and lkdata.load_fashion_mnist is load_fashion_mnist


# --------------------------------------------------------------------------
# resize_images
# --------------------------------------------------------------------------
def test_resize_images_matches_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip(
        "tensorflow",
        reason="TensorFlow's tf.image.resize is the oracle for resize_images; "
               "install it with `pip install tensorflow-cpu`",
    )
    rng = np.random.default_rng(SEED)
    images = load_fashion_mnist("test", folder=REPO_DATA)[0][:500]
    noise = rng.integers(0, 256, size=(20, 28, 28), dtype=np.uint8)
    odd = rng.integers(0, 256, size=(3, 13, 17), dtype=np.uint8)
    for batch in (images, noise, odd):
        for size in (48, 28, 20, 64, 1):
            got = resize_images(batch, size)
            expected = tf.image.resize(batch[..., None], (size, size), method="bilinear",
                                       antialias=False).numpy() / 255.0
            assert got.shape == (len(batch), 1, size, size) and got.dtype == np.float32
            np.testing.assert_allclose(got, expected.transpose(0, 3, 1, 2), rtol=0, atol=1e-5)
            assert got.min() >= 0.0 and got.max() <= 1.0


@pytest.mark.check
def test_resize_images_default_and_constant():
    x = np.full((2, 28, 28), 255, np.uint8)
    y = resize_images(x)
    assert y.shape == (2, 1, 48, 48) and y.dtype == np.float32
    assert np.allclose(y, 1.0)


def test_resize_images_rejects_bad_input():
    with pytest.raises(TypeError, match=r"images must be uint8"):
        resize_images(np.zeros((2, 28, 28), np.float32))
    with pytest.raises(ValueError, match=r"images must be 3-D \(N, H, W\).*images\[None\]"):
        resize_images(np.zeros((28, 28), np.uint8))
    with pytest.raises(ValueError, match=r"size must be >= 1"):
        resize_images(np.zeros((1, 28, 28), np.uint8), 0)
    with pytest.raises(TypeError, match=r"size must be an int"):
        resize_images(np.zeros((1, 28, 28), np.uint8), 48.0)
