"""Hostile and careless files, made by generators (no big file ships): every reader refuses them with
its own error naming the file, before allocating more than twice the file's size (plus a fixed
256 KiB for the interpreter's own work: exception objects, messages, zlib's window), and without
NumPy's raw MemoryError.  tests/hostile/README.md lists the cases."""
from __future__ import annotations

import gzip
import io
import pickle
import struct
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from labkit.data import ArrayFileError, IDXFormatError, read_idx, read_npz
from labkit.models import alexnet_weights as aw
from labkit.models import fashion_mnist as fm

SLACK = 256 * 1024


def peak_bytes(call) -> tuple[int, BaseException | None]:
    """(peak bytes Python and NumPy allocated during call(), the exception it raised or None)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    err = None
    try:
        call()
    except BaseException as exc:      # noqa: BLE001 - the test inspects it
        err = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, err


def refused(call, path: Path, error: type, match: str) -> None:
    """call() raises ``error`` naming ``path`` and matching ``match``, having allocated at most twice
    the file's size (plus SLACK)."""
    peak, err = peak_bytes(call)
    assert isinstance(err, error), f"expected {error.__name__}, got {err!r}"
    assert not isinstance(err, MemoryError)
    assert str(path) in str(err), str(err)
    assert __import__("re").search(match, str(err)), str(err)
    limit = 2 * path.stat().st_size + SLACK
    assert peak <= limit, f"allocated {peak:,} bytes before refusing a {path.stat().st_size:,}-byte file"


# --- IDX ---------------------------------------------------------------------------------------------
def idx_header(shape) -> bytes:
    return b"\x00\x00\x08" + bytes([len(shape)]) + struct.pack(f">{len(shape)}I", *shape)


def gzip_stream(head: bytes, zeros: int) -> bytes:
    """head, then ``zeros`` zero bytes, gzip-compressed as a stream (never all in memory)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as g:
        g.write(head)
        chunk = bytes(1 << 20)
        left = zeros
        while left > 0:
            g.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
    return buf.getvalue()


def test_a_gzip_bomb_is_refused_after_its_header(tmp_path):
    # The header declares 10 images of 28x28 (7,840 bytes); the stream inflates to 256 MiB.
    p = tmp_path / "bomb-images-idx3-ubyte.gz"
    p.write_bytes(gzip_stream(idx_header((10, 28, 28)), 256 << 20))
    refused(lambda: read_idx(p), p, IDXFormatError, r"need exactly 7,840 bytes.*trailing bytes")


def test_an_idx_header_declaring_more_than_its_file_can_hold(tmp_path):
    p = tmp_path / "huge.gz"
    p.write_bytes(gzip.compress(idx_header((60000, 4000, 4000))))       # 960 GB declared in 60 bytes
    refused(lambda: read_idx(p), p, IDXFormatError, r"declare 960,000,000,000 bytes")
    p2 = tmp_path / "raw-huge"
    p2.write_bytes(idx_header((50000, 100, 100)) + bytes(10))           # raw: the file holds 10 bytes
    refused(lambda: read_idx(p2), p2, IDXFormatError, r"truncated payload|declare")


def test_a_modest_idx_file_still_reads(tmp_path):
    data = np.random.default_rng().integers(0, 256, (7, 5, 3), dtype=np.uint8)
    p = tmp_path / "ok.gz"
    p.write_bytes(gzip.compress(idx_header(data.shape) + data.tobytes()))
    assert np.array_equal(read_idx(p), data)


# --- .npz ----------------------------------------------------------------------------------------------
def npz(path: Path, members: dict[str, bytes], compress=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for name, raw in members.items():
            z.writestr(f"{name}.npy", raw)
    return path


def magic_and_header(shape, descr="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()                # the magic, the version and the header


@pytest.mark.parametrize("shape", [(10**12,), (10**6, 10**7)], ids=["1e12", "1e13"])
def test_an_npz_member_declaring_trillions_of_floats(tmp_path, shape):
    p = npz(tmp_path / "w.npz", {"conv1_w": magic_and_header(shape) + bytes(16)})
    refused(lambda: read_npz(p, max_bytes=8 << 20), p, ArrayFileError, r"declares .* but the archive stores 16 bytes")
    refused(lambda: fm.load_weights(p), p, ValueError, r"archive stores 16 bytes.*train_fashion_mnist")


def test_an_npz_deflate_bomb_is_refused_by_the_cap(tmp_path):
    # 64 MiB of zeros in a ~64 KB archive: a whole, consistent member, but more than weights can need.
    raw = magic_and_header((16 << 20,)) + bytes(64 << 20)
    p = npz(tmp_path / "bomb.npz", {"fc1_w": raw}, compress=zipfile.ZIP_DEFLATED)
    del raw
    refused(lambda: fm.load_weights(p), p, ValueError, r"over the 8,388,608 this file's contents can need")


@pytest.mark.check
def test_an_npz_object_member_is_refused_unread(tmp_path):
    body = magic_and_header((1,), descr="|O") + pickle.dumps(np.array([1], dtype=object), protocol=2)
    p = npz(tmp_path / "obj.npz", {"conv1_w": body})
    refused(lambda: read_npz(p, max_bytes=1 << 20), p, ArrayFileError, r"object \(pickled\) array")


@pytest.mark.check
def test_an_npz_read_back_is_exact(tmp_path):
    a = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
    b = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))
    p = tmp_path / "ok.npz"
    np.savez(p, a=a, b=b)
    got = read_npz(p, max_bytes=1 << 20)
    assert np.array_equal(got["a"], a) and np.array_equal(got["b"], b) and got["b"].flags.c_contiguous


# --- bvlc_alexnet.npy ------------------------------------------------------------------------------------
class _Declares:
    """Pickles as NumPy's array reconstruction with the state ``state`` (shape, dtype, data) it gives."""

    def __init__(self, state):
        self.state = state

    def __reduce__(self):
        from numpy._core.multiarray import _reconstruct
        return (_reconstruct, (np.ndarray, (0,), b"b"), self.state)


def bvlc_file(path: Path, obj) -> Path:
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump(obj, f, protocol=2)
    return path


@pytest.mark.check
def test_a_bvlc_file_declaring_5e8_objects_is_refused_before_allocating(tmp_path):
    p = bvlc_file(tmp_path / "objects.npy", _Declares((1, (500_000_000,), np.dtype(object), False, [])))
    assert p.stat().st_size < 400
    refused(lambda: aw.read_bvlc_npy(p), p, aw.WeightFileError, r"declares 500,000,000 elements.*refused")


def test_a_bvlc_array_declaring_more_bytes_than_it_holds(tmp_path):
    inner = _Declares((1, (10**6, 10**6), np.dtype("<f4"), False, b"\x00" * 16))
    p = bvlc_file(tmp_path / "floats.npy", {"conv1": [inner, inner]})
    refused(lambda: aw.read_bvlc_npy(p), p, aw.WeightFileError, r"declares \(1000000, 1000000\) float32.*holds 16 bytes")


# --- careless inputs: the message says the cause and the fix ------------------------------------------
def test_kkcm_weights_where_c_equals_k_are_named_as_such():
    """On the ladder's square-kernel rungs, weights that cannot be MCKK but read as KKCM get the fix.
    (variant="auto" takes them: (3, 3, 3, 8) is also a valid 3x8 kernel, as PyTorch would take it.)"""
    import labkit
    x = np.zeros((1, 3, 9, 9), np.float32)
    w_kkcm = np.zeros((3, 3, 3, 8), np.float32)          # (kh, kw, C, M) with C = K = 3
    with pytest.raises(ValueError, match=r"looks like KKCM .* w\.transpose\(3, 2, 0, 1\)"):
        labkit.conv2d(labkit.xp.asarray(x), labkit.xp.asarray(w_kkcm), variant="naive")


def test_an_array_for_a_scalar_argument_is_described_not_printed(monkeypatch):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    import labkit
    mod = labkit.load("vector_add")
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(TypeError, match=r"got an array of shape \(100000,\) and dtype int64") as info:
        mod.get_function("vector_add")((1,), (8,), (x, y, np.float32(2), np.arange(100_000)))
    assert len(str(info.value)) < 400


@pytest.mark.check
@pytest.mark.parametrize("name, value", [("LABKIT_CPU_STACK_KIB", "0"), ("LABKIT_CPU_STACK_KIB", "lots"),
                                         ("LABKIT_CPU_WORKERS", "-2")])
def test_bad_executor_settings_name_the_variable(monkeypatch, name, value):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    monkeypatch.setenv(name, value)
    import labkit
    from labkit.errors import LaunchError
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(LaunchError, match=rf"{name}='{value}': must be an integer from"):
        labkit.load("vector_add").get_function("vector_add")((1,), (8,), (x, y, np.float32(2), np.int32(8)))


@pytest.mark.check
def test_a_damaged_cached_module_is_built_again(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    import labkit
    from labkit.backends.cpu import CPUModule
    code = labkit.kernels.source("vector_add")
    CPUModule(code, path="vector_add.cu")                  # builds and caches the shared object
    cached = [p for p in (tmp_path / "cpu-executor").glob("*.so")]
    assert len(cached) == 1
    cached[0].write_bytes(b"\x7fELF truncated")             # damaged: a disk full, a killed build
    mod = CPUModule(code, path="vector_add.cu")
    x, y = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    mod.get_function("vector_add")((1,), (8,), (x, y, np.float32(2), np.int32(8)))
    assert np.array_equal(y, 2 * np.arange(8, dtype=np.float32) + 1)


@pytest.mark.parametrize("imgs", [0, -1])
def test_conv_pool_images_per_block_must_be_positive(imgs):
    import labkit
    xp = labkit.xp
    x, w, b = xp.zeros((2, 1, 12, 12), xp.float32), xp.zeros((3, 1, 5, 5), xp.float32), xp.zeros(3, xp.float32)
    with pytest.raises(ValueError, match=rf"imgs must be an int from 1 to 64, got {imgs}"):
        labkit.layers.conv_pool_tanh(x, w, b, imgs=imgs)
