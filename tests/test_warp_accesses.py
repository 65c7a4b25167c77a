"""One warp's accesses from the counting build (labkit.measure.counters.warp_accesses), grouped per
warp instruction (labkit.measure.warp.warp_instructions) and drawn (labkit.plots.warp_picture): exact
lanes, offsets, sectors and shared-memory wavefronts on patterns whose answer is known."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

import labkit
from labkit.errors import LaunchError
from labkit.measure.counters import warp_accesses
from labkit.measure.warp import warp_instructions

matplotlib.use("Agg")

SHARED_STRIDE = r"""
extern "C" __global__ void strided(float* out, int stride) {
  __shared__ float s[32 * 33];
  s[threadIdx.x * stride] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x * stride];
}
"""


def _vector_add(n=1000):
    x, y = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    fn = labkit.load("vector_add").get_function("vector_add")
    return lambda: fn(((n + 255) // 256,), (256,), (x, y, np.float32(2.0), np.int32(n)))


@pytest.mark.check
def test_vector_add_one_warp_is_three_coalesced_instructions():
    rows = warp_accesses(_vector_add(), block=(1, 0, 0), warp=2)      # threads 320 .. 351
    assert len(rows) == 96
    ins = warp_instructions(rows)
    assert [(i["kind"], i["array"]) for i in ins] == [("global load", "argument 0"), ("global load", "argument 1"),
                                                      ("global store", "argument 1")]
    for i in ins:
        assert i["offsets"] == {lane: 4 * (320 + lane) for lane in range(32)}
        assert i["sectors"] == [40, 41, 42, 43]       # 128 bytes from byte 1280: four sectors


def test_the_last_warp_past_the_end_makes_only_its_live_lanes_accesses():
    rows = warp_accesses(_vector_add(1000), block=(3, 0, 0), warp=7)   # threads 992 .. 1023: 8 live
    assert sorted({r["lane"] for r in rows}) == list(range(8))
    assert warp_instructions(rows)[0]["sectors"] == [124]


def _naive(tmp_path, swap: bool):
    """conv_naive on 32x32 outputs (H = W = 34, K = 3), or the same with threadIdx.x over the rows."""
    src = labkit.kernels.source("conv_naive")
    if swap:
        src = src.replace("TILE_WIDTH + threadIdx.y;", "TILE_WIDTH + threadIdx.@;").replace(
            "TILE_WIDTH + threadIdx.x;", "TILE_WIDTH + threadIdx.y;").replace("threadIdx.@", "threadIdx.x")
    path = tmp_path / ("rows.cu" if swap else "cols.cu")
    path.write_text(src)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 34, 34), dtype=np.float32)
    k = rng.standard_normal((1, 1, 3, 3), dtype=np.float32)
    b, y = np.zeros(1, np.float32), np.zeros((1, 1, 32, 32), np.float32)

    def launch():
        fn = labkit.load_source(path, defines={"TILE_WIDTH": 16}, own=True).get_function("conv_naive")
        fn((1, 1, 4), (16, 16), (x, k, b, y, *(np.int32(v) for v in (1, 1, 34, 34, 1, 3, 0))))
    return launch


@pytest.mark.parametrize("swap, lanes_at, sectors", [
    (False, lambda lane: (lane // 16, lane % 16), 4),      # two rows of 16 columns: 2 x 64 bytes
    (True, lambda lane: (lane % 16, lane // 16), 16)])     # 16 rows, two columns: a sector per row
def test_the_naive_store_coalesced_and_not(tmp_path, swap, lanes_at, sectors):
    ins = warp_instructions(warp_accesses(_naive(tmp_path, swap), block=(0, 0, 0), warp=0))
    store = [i for i in ins if i["kind"] == "global store"]
    assert len(store) == 1
    assert store[0]["elements"] == {lane: 32 * lanes_at(lane)[0] + lanes_at(lane)[1] for lane in range(32)}
    assert len(store[0]["sectors"]) == sectors


@pytest.mark.parametrize("stride, wavefronts", [(1, 1), (2, 2), (33, 1), (32, 32)])
def test_shared_strides_make_their_bank_conflicts(tmp_path, stride, wavefronts):
    path = tmp_path / "strided.cu"
    path.write_text(SHARED_STRIDE)
    out = np.zeros(32, np.float32)
    fn = labkit.load_source(path).get_function("strided")
    ins = warp_instructions(warp_accesses(lambda: fn((1,), (32,), (out, np.int32(stride)))))
    assert [i["kind"] for i in ins] == ["shared store", "shared load", "global store"]
    for i in ins[:2]:
        assert i["banks"] == {lane: (lane * stride) % 32 for lane in range(32)}
        assert (i["wavefronts"], i["ideal"]) == (wavefronts, 1)
    np.testing.assert_array_equal(out, np.arange(32))       # the launch's results are as without counting


def test_bad_requests_are_clear_errors():
    with pytest.raises(ValueError, match="no block \\(9, 0, 0\\), warp 0"):
        warp_accesses(_vector_add(), block=(9, 0, 0))
    with pytest.raises(ValueError, match="8 warps\\): no block \\(0, 0, 0\\), warp 8"):
        warp_accesses(_vector_add(), warp=8)
    with pytest.raises(LaunchError, match="no launch 1"):
        warp_accesses(_vector_add(), launch=1)
    with pytest.raises(ValueError, match="block must be three"):
        warp_accesses(_vector_add(), block=(0, 0))


def test_the_picture_has_a_strip_per_instruction_with_its_cost():
    ins = warp_instructions(warp_accesses(_vector_add(), block=(1, 0, 0), warp=2))
    fig = labkit.plots.warp_picture(ins[:2])
    assert len(fig.axes) == 2
    assert fig.axes[0].get_title(loc="left") == ("global load of argument 0: 32 lanes, 4 sectors of 32 B "
                                                 "(its 32 distinct elements fit in 4)")
    assert "320" in [t.get_text() for t in fig.axes[0].texts]
    with pytest.raises(ValueError, match="no warp instruction"):
        labkit.plots.warp_picture([])
