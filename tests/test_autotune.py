"""The autotuner (labkit.autotune): its settings, its disk cache (plain JSON, this GPU's only, never a
stale or forged winner), its search (a wrong, unwritten or broken candidate never wins; the budget
stops it, the first candidate is always tried), each family's bench (the sampled float64 check sees a
wrong value and an unwritten output), and on a GPU the whole path: a search, its winner in the disk
cache, a later choice from there.  The CPU executor runs the search itself (its clock, its kernels);
``choose`` never searches there."""
from __future__ import annotations

import json
import os
from dataclasses import asdict

import numpy as np
import pytest

import labkit
from labkit import autotune
from labkit.autotune.cache import MAX_FILE_BYTES, DiskCache, candidates_hash
from labkit.autotune.search import search
from labkit.models.autotuning import TuneReport
from labkit.ops import conv as conv_ops
from labkit.ops import depthwise, gemm, implicit
from labkit.ops.tuned_config import candidates as tuned_candidates
from labkit.reference import conv2d
from labkit.reference.samples import conv_samples, gemm_samples, sample_positions
from labkit.shapes import ConvLayer

pytestmark = pytest.mark.check
FP = {"gpu": "Test GPU", "compute_capability": [9, 0], "sms": 7, "cuda_runtime": 1, "cuda_driver": 2,
      "cupy": "0", "nvrtc": [1, 0]}


def rng():
    return np.random.default_rng()


# --- settings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, want", [("", "auto"), ("auto", "auto"), ("0", "off"), ("1", "on"), (" ON ", "on")])
def test_mode_reads_the_environment(monkeypatch, raw, want):
    monkeypatch.setenv(autotune.MODE_ENV, raw)
    assert autotune.mode() == want


def test_bad_settings_are_errors_that_name_the_variable(monkeypatch):
    monkeypatch.setenv(autotune.MODE_ENV, "yes")
    with pytest.raises(ValueError, match="LABKIT_AUTOTUNE must be 0, 1 or auto"):
        autotune.mode()
    for bad in ("-1", "0", "nan", "inf", "soon"):
        monkeypatch.setenv(autotune.BUDGET_ENV, bad)
        with pytest.raises(ValueError, match="LABKIT_AUTOTUNE_BUDGET must be a positive number"):
            autotune.budget_s()
    monkeypatch.setenv(autotune.BUDGET_ENV, "2.5")
    assert autotune.budget_s() == 2.5


def test_forced_overrides_and_restores(monkeypatch):
    monkeypatch.setenv(autotune.MODE_ENV, "0")
    with autotune.forced("on"):
        assert autotune._mode() == "on"
    assert autotune._mode() == "off"
    with pytest.raises(ValueError):
        autotune.forced("sometimes")


def test_choose_never_searches_on_the_cpu_executor():
    if labkit.backend() == "cuda":
        pytest.skip("the CPU executor's rule (a GPU searches)")

    def never():
        raise AssertionError("a bench was made on the CPU executor")
    p = autotune.Problem("test", ("gemm",), "k", [{"a": 1}, {"a": 2}], never)
    with autotune.forced("on"):
        assert autotune.choose(p) == {"a": 1}


# --- the disk cache -----------------------------------------------------------------------------------
def test_cache_round_trip_and_merge(tmp_path):
    path = tmp_path / "autotune" / "x.json"
    one, two = DiskCache(path, FP), DiskCache(path, FP)
    one.put("fam|h|k1", {"config": {"t": 1}, "ms": 1.0})
    two.put("fam|h|k2", {"config": {"t": 2}, "ms": 2.0})          # another process: both kept
    assert one.get("fam|h|k1")["config"] == {"t": 1} and one.get("fam|h|k2")["config"] == {"t": 2}
    assert "date" in one.get("fam|h|k1")
    assert json.loads(path.read_text())["fingerprint"] == FP


def test_cache_of_another_gpu_or_driver_is_never_read(tmp_path):
    path = tmp_path / "x.json"
    DiskCache(path, FP).put("fam|h|k", {"config": {"t": 1}})
    for field, value in (("gpu", "NVIDIA H200"), ("cuda_driver", 3), ("sms", 132)):
        assert DiskCache(path, {**FP, field: value}).get("fam|h|k") is None


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]", b'{"fingerprint": 1}', b"\xff\xfe",
                                     b'{"fingerprint": %s, "entries": {"k": {"config": 5}, "j": 3}}'])
def test_a_damaged_cache_file_is_ignored(tmp_path, content):
    path = tmp_path / "x.json"
    path.write_bytes(content.replace(b"%s", json.dumps(FP).encode()))
    c = DiskCache(path, FP)
    assert c.get("k") is None and c.get("j") is None and c.entries() == {}
    c.put("k", {"config": {"t": 1}})           # and a put replaces it with a good one
    assert DiskCache(path, FP).get("k")["config"] == {"t": 1}


def test_an_oversized_cache_file_is_not_read(tmp_path):
    path = tmp_path / "x.json"
    entries = {"k": {"config": {"t": 1}}, "pad": {"config": {}, "x": "y" * (MAX_FILE_BYTES + 10)}}
    path.write_text(json.dumps({"fingerprint": FP, "entries": entries}))
    assert DiskCache(path, FP).get("k") is None


def test_source_hash_changes_with_the_kernel_text(tmp_path, monkeypatch):
    from labkit.autotune import cache
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    f = kdir / "fam.cu"
    f.write_text("__global__ void k() {}\n")
    monkeypatch.setattr(cache, "kernel_path", lambda family: kdir / f"{family}.cu")
    h1 = cache.source_hash(("fam",))
    f.write_text("__global__ void k() { /* changed */ }\n")
    os.utime(f, ns=(1, 10**18))
    assert cache.source_hash(("fam",)) != h1


# --- the search -----------------------------------------------------------------------------------------
class FakeBench:
    """Candidates {"v": value, "cost": sleep ms}: "bad" ones give a wrong answer, "broken" ones fail to build."""

    def __init__(self):
        self.built = []

    def build(self, config):
        self.built.append(config["v"])
        if config.get("broken"):
            raise RuntimeError("too many resources requested for launch")
        def run():
            import time
            time.sleep(config["cost"] / 1e3)
            self.last = config["v"]          # what the launch "wrote"
        return run

    def check(self, launch):
        launch()
        return None if self.last == "good" else "wrong values"


def test_search_drops_wrong_and_broken_candidates_and_takes_the_fastest_right_one():
    # 20 ms against 1 ms: a sleep on a loaded 2-core host overshoots by milliseconds, not by 19
    cands = [{"v": "good", "cost": 20}, {"v": "bad", "cost": 0}, {"v": "good", "cost": 1, "fast": 1},
             {"v": "good", "cost": 1, "broken": 1}]
    o = search(cands, FakeBench(), budget_s=60, workers=2)
    assert o.config == {"v": "good", "cost": 1, "fast": 1}
    errors = [r["error"] for r in o.rows if "error" in r]
    assert errors == ["wrong values", "RuntimeError: too many resources requested for launch"]
    assert o.first_ms is not None and o.ms < o.first_ms
    assert o.entry()["timed"] == 2 and o.entry()["failed"] == 2 and o.entry()["candidates"] == 4


def test_the_budget_stops_the_search_after_its_first_round_which_holds_the_first_candidate():
    bench = FakeBench()
    cands = [{"v": "good", "cost": 1}] + [{"v": "good", "cost": 0, "i": i} for i in range(50)]
    o = search(cands, bench, budget_s=1e-9, workers=4)
    assert len(bench.built) == 4 and len(o.rows) == 4 and o.rows[0]["config"] == cands[0] and "ms" in o.rows[0]
    o = search(cands, FakeBench(), budget_s=60, workers=4)
    assert len(o.rows) == 51


def test_a_smaller_first_round_builds_only_it_once_the_budget_is_spent():
    bench = FakeBench()
    cands = [{"v": "good", "cost": 1}] + [{"v": "good", "cost": 0, "i": i} for i in range(20)]
    o = search(cands, bench, budget_s=1e-9, workers=8, first=3)
    assert len(bench.built) == 3 and o.rows[0]["config"] == cands[0]


def test_searches_at_once_share_the_first_round(tmp_path, monkeypatch):
    """Two problems searching at the same time: the first promised all 16 workers, the second half."""
    import threading
    from labkit.autotune.search import Outcome
    monkeypatch.setattr(autotune.backends, "current", lambda: "cuda")
    monkeypatch.setattr(autotune, "_capturing", lambda: False)
    disk = DiskCache(tmp_path / "c.json", FP)
    monkeypatch.setattr(autotune, "disk_cache", lambda: disk)
    monkeypatch.setattr(autotune, "default_workers", lambda: 16)
    firsts, both_in, go = [], threading.Barrier(2), threading.Event()

    def fake_search(candidates, bench, budget, first=None):
        firsts.append(first)
        if len(firsts) == 1:
            both_in.wait(timeout=10)      # the first stays under way until the second has started
            go.wait(timeout=10)
        else:
            both_in.wait(timeout=10)
            go.set()
        return Outcome(candidates[-1], 1.0, 2.0, [{"config": candidates[-1], "ms": 1.0}])
    monkeypatch.setattr(autotune, "search", fake_search)
    problems = [autotune.Problem("fam", ("conv_implicit",), f"share{i}", [{"a": 1}, {"a": 2}], lambda: None)
                for i in range(2)]
    first_thread = threading.Thread(target=autotune.choose, args=(problems[0],))
    first_thread.start()
    while not firsts:
        pass
    autotune.choose(problems[1])
    first_thread.join(timeout=10)
    assert firsts == [16, 8] and autotune._ACTIVE == [0]


def test_a_later_batch_size_of_one_shape_re_times_what_built_and_spends_what_is_left_of_the_budget(
        tmp_path, monkeypatch):
    """A candidate's kernel is compiled for the shape: at the next batch size the candidates that built
    come first (all of them in the first round) and new builds get only the shape's budget left."""
    from labkit.autotune.search import Outcome
    monkeypatch.setattr(autotune.backends, "current", lambda: "cuda")
    monkeypatch.setattr(autotune, "_capturing", lambda: False)
    disk = DiskCache(tmp_path / "c.json", FP)
    monkeypatch.setattr(autotune, "disk_cache", lambda: disk)
    monkeypatch.setattr(autotune, "default_workers", lambda: 16)
    monkeypatch.setenv("LABKIT_AUTOTUNE_BUDGET", "6")
    calls = []

    def fake_search(candidates, bench, budget, first=None):
        calls.append((list(candidates), budget, first))
        rows = [{"config": candidates[0], "ms": 2.0}, {"config": candidates[3], "ms": 1.0},
                {"config": candidates[4], "error": "wrong values"}]
        return Outcome(candidates[3], 1.0, 2.0, rows, seconds=4.0)
    monkeypatch.setattr(autotune, "search", fake_search)
    cands = [{"t": i} for i in range(8)]
    for n in (1, 2, 4):
        autotune.choose(autotune.Problem("fam", ("conv_implicit",), f"shapeX_N{n}", cands, lambda: None,
                                         shape="shapeX"))
    (c1, b1, f1), (c2, b2, f2), (c3, b3, f3) = calls
    assert c1 == cands and b1 == 6 and f1 == 16
    # {"t": 3} built at N=1 (and {"t": 0}, the default, always first); {"t": 4} failed: not promised again
    assert c2[:2] == [{"t": 0}, {"t": 3}] and sorted(c["t"] for c in c2) == list(range(8))
    assert b2 == 2.0 and f2 == 16
    assert b3 == 0.0                               # 4 + 4 seconds spent: no new builds at N=4
    # another shape has its own budget
    autotune.choose(autotune.Problem("fam", ("conv_implicit",), "shapeY_N1", cands, lambda: None, shape="shapeY"))
    assert calls[-1][1] == 6


def test_a_hopeless_candidate_is_timed_once_not_repeated():
    calls = {}

    class Counting(FakeBench):
        def build(self, config):
            run = super().build(config)
            def counted():
                calls[config["cost"]] = calls.get(config["cost"], 0) + 1
                run()
            return counted
    o = search([{"v": "good", "cost": 2}, {"v": "good", "cost": 40}], Counting(), budget_s=60, workers=1)
    assert o.config["cost"] == 2 and [r["ms"] > 0 for r in o.rows] == [True, True]
    # each: one check; the slow one a warm-up and one timed launch, the fast one those and its repeats
    assert calls[40] == 3 and calls[2] > calls[40] + 2


def test_compiles_side_by_side_are_bounded_by_the_compile_slots(monkeypatch):
    """Many threads loading modules (a network's layers, each search's candidates) compile at most
    COMPILE_SLOTS at once; a thread waiting for another's compile of the same module holds no slot."""
    import threading
    import time as clock
    from labkit import loader
    from labkit.backends import cpu
    monkeypatch.setattr(loader, "COMPILE_SLOTS", threading.BoundedSemaphore(2))
    state = {"now": 0, "most": 0, "made": 0}
    lock = threading.Lock()

    class SlowModule:
        def __init__(self, code, **kw):
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
                state["made"] += 1
            clock.sleep(0.05)
            with lock:
                state["now"] -= 1
    monkeypatch.setattr(cpu, "CPUModule", SlowModule)
    monkeypatch.setattr(loader.backends, "current", lambda: "cpu")
    loader.reload()
    tasks = [lambda i=i: loader.load("vector_add", defines={"LABKIT_TEST_SLOT": i % 6}) for i in range(18)]
    threads = [threading.Thread(target=t) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loader.reload()
    assert state["made"] == 6 and state["most"] == 2


def test_layers_of_one_shape_choosing_together_search_once(tmp_path, monkeypatch):
    """A network plans its layers in threads: four layers of one problem make one search."""
    import threading
    import time as clock
    from labkit.autotune.search import Outcome
    monkeypatch.setattr(autotune.backends, "current", lambda: "cuda")
    monkeypatch.setattr(autotune, "_capturing", lambda: False)
    disk = DiskCache(tmp_path / "x.json", FP)
    monkeypatch.setattr(autotune, "disk_cache", lambda: disk)
    searches = []

    def fake_search(candidates, bench, budget, first=None):
        searches.append(bench)
        clock.sleep(0.2)
        return Outcome(candidates[1], 1.0, 2.0, [{"config": c, "ms": 1.0} for c in candidates], 0.2, len(candidates))
    monkeypatch.setattr(autotune, "search", fake_search)
    autotune.clear_history()
    p = autotune.Problem("test", ("gemm",), "shape", [{"a": 1}, {"a": 2}], lambda: "bench")
    got = []
    threads = [threading.Thread(target=lambda: got.append(autotune.choose(p))) for _ in range(4)]
    with autotune.forced("on"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(searches) == 1 and got == [{"a": 2}] * 4
    assert sorted(r["source"] for r in autotune.history()) == ["cache"] * 3 + ["search"]
    # a problem whose search found nothing right is not searched again in this process
    none = autotune.Problem("test", ("gemm",), "none", [{"a": 1}, {"a": 2}], lambda: "bench")
    monkeypatch.setattr(autotune, "search", lambda c, b, t, first=None: (searches.append(b), Outcome(None, None, None, [
        {"config": c[0], "error": "wrong values"}], 0.0, 2))[1])
    with autotune.forced("on"), pytest.warns(UserWarning, match="no candidate"):
        assert autotune.choose(none) == {"a": 1}
    with autotune.forced("on"):
        assert autotune.choose(none) == {"a": 1}
    assert len(searches) == 2


def test_a_search_with_no_right_candidate_has_no_winner():
    o = search([{"v": "bad", "cost": 0}], FakeBench(), budget_s=10)
    assert o.config is None and o.ms is None


# --- the float64 samples ------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [ConvLayer(4, 9, 7, 6, 3, 2, 1, 2), ConvLayer(3, 5, 6, 5, 1, 1, 0, 1),
                                   ConvLayer(6, 11, 8, 6, 3, 1, 1, 6)])
def test_conv_samples_agree_with_the_reference(layer):
    r = rng()
    x = r.standard_normal((2, layer.C, layer.H, layer.W)).astype(np.float32)
    w = r.standard_normal((layer.M, layer.C // layer.groups, layer.K, layer.K)).astype(np.float32)
    b = r.standard_normal(layer.M).astype(np.float32)
    full = np.maximum(conv2d(x, w, b, stride=layer.stride, pad=layer.pad, groups=layer.groups), 0)
    idx = sample_positions(np, full.size, 40, seed=3)
    ref, terms = conv_samples(np, x, w, b, layer, idx, "relu")
    np.testing.assert_allclose(ref, full.reshape(-1)[idx], rtol=1e-12, atol=1e-12)
    assert (terms >= np.abs(ref) - 1e-12).all()


def test_gemm_samples_agree_with_the_product():
    r = rng()
    a, b, bias = r.standard_normal((7, 5)), r.standard_normal((5, 9)), r.standard_normal(9)
    idx = sample_positions(np, 63, 20, seed=1)
    ref, _ = gemm_samples(np, a, b, bias, idx, "tanh")
    np.testing.assert_allclose(ref, np.tanh(a @ b + bias).reshape(-1)[idx], rtol=1e-12)


@pytest.mark.parametrize("chunk", [None, 7])
def test_conv_samples_of_any_shape_in_parts_with_a_residual(chunk, monkeypatch):
    """Rectangular, dilated, strided, grouped; weights given as a non-contiguous view; the gathers cut
    in parts of 7 values (a huge receptive field's way) give the same sums."""
    from labkit.reference import samples
    if chunk:
        monkeypatch.setattr(samples, "HOST_GATHER_MAX", chunk)
    r = rng()
    layer = ConvLayer.of(6, 13, 10, 4, (3, 2), (2, 1), (1, 2), (2, 1), 2)
    x = r.standard_normal((3, 6, 13, 10)).astype(np.float32)
    w = np.ascontiguousarray(r.standard_normal((2, 3, 4, 3)).astype(np.float32).transpose(2, 1, 3, 0))[..., ::-1]
    w = w[:, :, :, :2]                                   # (4, 3, 3, 2), not contiguous
    assert not w.flags.c_contiguous
    b = r.standard_normal(4).astype(np.float32)
    full = conv2d(x, w, b, stride=(2, 1), pad=(1, 2), dilation=(2, 1), groups=2)
    res = r.standard_normal(full.shape).astype(np.float32)
    idx = sample_positions(np, full.size, 50, seed=5)
    ref, terms = samples.conv_samples(np, x, w, b, layer, idx, "relu6", residual=res)
    want = np.minimum(np.maximum(full + res, 0), 6).reshape(-1)[idx]
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)
    assert (terms >= np.abs(full + res).reshape(-1)[idx] - 1e-9).all()


def test_the_sums_kept_on_a_gpu_for_large_gathers_are_the_host_ones(monkeypatch):
    """Over HOST_GATHER_MAX values a GPU keeps the sums on its own module (CuPy), in parts: here a
    module that is not NumPy but computes as it does stands for CuPy, with parts of 5 values, and
    gives the host's values."""
    import types
    from labkit.ops.conv_transpose import TransposeGeometry
    from labkit.reference import samples
    gpu_like = types.SimpleNamespace(**{f: getattr(np, f) for f in ("asarray", "abs", "concatenate", "maximum",
                                                                     "minimum", "tanh", "float64")})
    r = rng()
    layer = ConvLayer.of(4, 9, 8, 6, (3, 2), (1, 2), (1, 0), (1, 2), 2)
    x = r.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w, b = r.standard_normal((6, 2, 3, 2)).astype(np.float32), r.standard_normal(6).astype(np.float32)
    geo = TransposeGeometry.of(4, 5, 6, 6, (3, 2), (2, 1), (1, 0), (1, 0), (1, 2), 2)
    xt, wt = r.standard_normal((2, 4, 5, 6)).astype(np.float32), r.standard_normal((4, 3, 3, 2)).astype(np.float32)
    a, bm, rows = r.standard_normal((7, 5)), r.standard_normal((5, 9)), r.standard_normal(7)
    idx_c = sample_positions(np, 2 * 6 * 9 * 3, 40)
    idx_t = sample_positions(np, 2 * 6 * geo.out_hw[0] * geo.out_hw[1], 40)
    idx_g = sample_positions(np, 63, 20)
    calls = [lambda xp: samples.conv_samples(xp, x, w, b, layer, idx_c, "tanh"),
             lambda xp: samples.conv_transpose_samples(xp, xt, wt, b, geo, idx_t, "relu"),
             lambda xp: samples.gemm_samples(xp, a, bm, rows, idx_g, None, "row")]
    want = [call(np) for call in calls]
    monkeypatch.setattr(samples, "HOST_GATHER_MAX", 5)
    assert samples._sums_module(gpu_like, 6) is gpu_like and samples._sums_module(np, 6) is np
    for call, (ref, terms) in zip(calls, want):
        got_ref, got_terms = call(gpu_like)
        np.testing.assert_allclose(got_ref, ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_terms, terms, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [None, 5])
def test_conv_transpose_samples_agree_with_the_reference(chunk, monkeypatch):
    from labkit.ops.conv_transpose import TransposeGeometry
    from labkit.reference import conv_transpose2d, samples
    if chunk:
        monkeypatch.setattr(samples, "HOST_GATHER_MAX", chunk)
    r = rng()
    geo = TransposeGeometry.of(4, 5, 6, 6, (3, 2), (2, 3), (1, 0), (1, 2), (1, 2), 2)
    x = r.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = r.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = r.standard_normal(6).astype(np.float32)
    full = conv_transpose2d(x, w, b, stride=(2, 3), pad=(1, 0), output_padding=(1, 2), dilation=(1, 2), groups=2)
    assert full.shape[2:] == geo.out_hw
    idx = sample_positions(np, full.size, 60, seed=2)
    ref, _ = samples.conv_transpose_samples(np, x, w, b, geo, idx, "relu")
    np.testing.assert_allclose(ref, np.maximum(full, 0).reshape(-1)[idx], rtol=1e-12, atol=1e-12)


def test_gemm_samples_with_a_transposed_operand_row_bias_and_parts(monkeypatch):
    from labkit.reference import samples
    monkeypatch.setattr(samples, "HOST_GATHER_MAX", 11)
    r = rng()
    a, bt, bias = r.standard_normal((7, 5)), r.standard_normal((9, 5)), r.standard_normal(7)
    idx = sample_positions(np, 63, 30, seed=4)
    ref, terms = samples.gemm_samples(np, a, bt.T, bias, idx, None, bias_per="row")
    want = (a @ bt.T + bias[:, None]).reshape(-1)[idx]
    np.testing.assert_allclose(ref, want, rtol=1e-12)
    assert (terms >= np.abs(want) - 1e-12).all()


def test_the_sampled_check_names_unwritten_wrong_and_nan_reference_outputs():
    from labkit.ops.plans import sampled_mismatch
    r = rng()
    a, bm = r.standard_normal((6, 4)).astype(np.float32), r.standard_normal((4, 5)).astype(np.float32)
    idx = sample_positions(np, 30, 30)
    ref, terms = gemm_samples(np, a, bm, None, idx)
    y = np.empty((6, 5), dtype=np.float32)

    def right():
        y[...] = a @ bm
    assert sampled_mismatch(y, right, idx, ref, terms, 1e-5) is None

    def one_unwritten():
        right()
        y[1, 2] = np.nan          # as if never written (the check filled y with NaN)
    assert "1 of 30 outputs NaN" in sampled_mismatch(y, one_unwritten, idx, ref, terms, 1e-5)

    def off_by_one():
        y[...] = a @ bm
        y[2, 3] += 1
    assert "1 of 30 sampled outputs wrong (at flat position 13" in sampled_mismatch(y, off_by_one, idx, ref, terms, 1e-5)
    nan_ref = ref.copy()
    nan_ref[4] = np.nan
    assert "1 of 30 sampled outputs wrong" in sampled_mismatch(y, right, idx, nan_ref, terms, 1e-5)
    strided = np.empty((6, 10), dtype=np.float32)[:, ::2]        # not contiguous: checked as it is

    def right_strided():
        strided[...] = a @ bm
    assert sampled_mismatch(strided, right_strided, idx, ref, terms, 1e-5) is None


def test_sample_positions_take_the_ends_and_stay_inside():
    idx = sample_positions(np, 10_000, 64)
    assert idx[0] == 0 and idx[1] == 9_999 and idx.min() >= 0 and idx.max() < 10_000 and len(idx) == 64
    assert (sample_positions(np, 5, 64) == np.arange(5)).all()


# --- each family's bench: the sampled check catches what it must ----------------------------------------
def _benches():
    r = rng()
    L = ConvLayer(6, 9, 11, 10, 3, 2, 1, 2)
    conv = implicit.ImplicitConv2d(labkit.xp.asarray(r.standard_normal((10, 3, 3, 3)).astype(np.float32)),
                                   labkit.xp.asarray(r.standard_normal(10).astype(np.float32)), L, activation="relu")
    yield "implicit", implicit._ImplicitBench(conv, 3), [{"tiles": asdict(t), "splits": n}
                                                         for t, n in conv.tuning_candidates(3)]
    w = labkit.xp.asarray(r.standard_normal((19, 33)).astype(np.float32))
    yield "gemm", gemm._GemmBench(7, 33, 19, w, None, "tanh", None), gemm.tuning_candidates(7, 33, 19)
    DL = depthwise.depthwise_layer(5, 9, 13, 2)
    dw = depthwise.DepthwiseConv2d(labkit.xp.asarray(r.standard_normal((5, 1, 3, 3)).astype(np.float32)), None, DL,
                                   activation="relu6")
    yield "depthwise", depthwise._DepthwiseBench(dw, 3), [asdict(t) for t in depthwise.tiling_candidates(DL, 3)]
    sizes = (3, 2, 9, 11, 4, 3)
    yield "conv_tuned", conv_ops._TunedBench(sizes, "tanh", None, None), [asdict(c) for c in
                                                                          tuned_candidates(*sizes[1:])]


@pytest.mark.parametrize("name", ["implicit", "gemm", "depthwise", "conv_tuned"])
def test_each_family_bench_passes_its_candidates_and_catches_a_wrong_or_unwritten_output(name):
    _, bench, cands = next(b for b in _benches() if b[0] == name)
    assert len(cands) >= 2
    for config in cands[:2]:
        assert bench.check(bench.build(config)) is None, config
    run = bench.build(cands[0])

    def wrong():
        run()
        bench.y.reshape(-1)[bench.idx[-1]] += 1.0

    def unwritten():
        run()
        bench.y.reshape(-1)[-3:] = np.nan
    assert "sampled outputs wrong" in bench.check(wrong)
    assert "NaN (never written)" in bench.check(unwritten)


def test_tune_plans_every_batch_size_and_reports(monkeypatch):
    from labkit.models.fashion_mnist import FashionNet
    net = FashionNet()
    report = labkit.tune(net, [2, 3], progress=False)
    assert isinstance(report, TuneReport)
    assert set(net._plans) == {2, 3} and report.batch_sizes == [2, 3]
    assert ("CPU executor" in report.summary()) == (labkit.backend() != "cuda")
    with pytest.raises(ValueError, match="positive"):
        labkit.tune(net, [0])
    with pytest.raises(TypeError, match="plan"):
        labkit.tune(object(), [1])


# --- on a GPU: a search, the disk cache, a later choice ---------------------------------------------------
@pytest.mark.gpu
def test_a_search_on_the_gpu_lands_in_the_disk_cache_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(autotune.BUDGET_ENV, "30")
    monkeypatch.setenv(autotune.MODE_ENV, "1")
    autotune.clear_history()
    r = rng()
    xp = labkit.xp
    L = ConvLayer(16, 13, 13, 48, 3, 1, 1, 1)
    w = xp.asarray(r.standard_normal((48, 16, 3, 3)).astype(np.float32))
    b = xp.asarray(r.standard_normal(48).astype(np.float32))
    x = xp.asarray(r.standard_normal((5, 16, 13, 13)).astype(np.float32))
    want = np.maximum(conv2d(x.get(), w.get(), b.get(), pad=1), 0)
    first = implicit.ImplicitConv2d(w, b, L, activation="relu")
    np.testing.assert_allclose(first(x).get(), want, rtol=1e-4, atol=1e-4)
    row = autotune.history()[-1]
    assert row["source"] == "search" and row["timed"] >= 2 and row["ms"] <= row["first_ms"]
    files = list((tmp_path / "autotune").glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["fingerprint"]["gpu"] == labkit.device().name
    (key, entry), = data["entries"].items()
    assert key.startswith("conv_implicit_fp32|") and "_N5_" in key
    # A later layer object (another process would read the same file) takes the cached winner.
    again = implicit.ImplicitConv2d(w, b, L, activation="relu")
    np.testing.assert_allclose(again(x).get(), want, rtol=1e-4, atol=1e-4)
    assert autotune.history()[-1]["source"] == "cache"
    assert again.plan(5).tiles == implicit.Tiles(**entry["config"]["tiles"])
    # A forged winner (not one of today's candidates) is never launched: a new search replaces it.
    data["entries"][key]["config"] = {"tiles": {**entry["config"]["tiles"], "bm": 4096}, "splits": 1}
    files[0].write_text(json.dumps(data))
    third = implicit.ImplicitConv2d(w, b, L, activation="relu")
    np.testing.assert_allclose(third(x).get(), want, rtol=1e-4, atol=1e-4)
    assert autotune.history()[-1]["source"] == "search"


@pytest.mark.gpu
@pytest.mark.parametrize("net", ["fashion", "alexnet", "mobilenet"])
def test_networks_with_every_layer_searched_agree_with_the_float64_reference(net, tmp_path, monkeypatch):
    """No shipped table, every problem searched (a short budget): the winners run the network right,
    first eagerly, then as the CUDA graph captured from the plan."""
    from labkit.checks import rel_error
    from labkit.models import alexnet, fashion_mnist as fm, mobilenet_v2 as mb
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LABKIT_SHIPPED_TABLES", "0")
    monkeypatch.setenv(autotune.MODE_ENV, "1")
    monkeypatch.setenv(autotune.BUDGET_ENV, "0.5")
    r = rng()
    if net == "fashion":
        w = fm.load_weights()
        model, x, ref = fm.FashionNet(w), r.standard_normal((37, 1, 48, 48)).astype(np.float32), None
        ref = fm.reference_logits(w, x)
    elif net == "alexnet":
        w = alexnet.load_weights()[0]
        model, x = alexnet.AlexNet(w), (r.standard_normal((3, 3, 227, 227)) * 50).astype(np.float32)
        ref = alexnet.reference_logits(w, x)
    else:
        w = mb.synthetic_weights()
        model, x = mb.MobileNetV2(w, input_hw=(96, 96)), r.standard_normal((3, 3, 96, 96)).astype(np.float32)
        ref = mb.reference_logits(w, x)
    autotune.clear_history()
    labkit.tune(model, [x.shape[0]], progress=False)
    assert any(row["source"] == "search" for row in autotune.history())
    e = np.exp(ref - ref.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    plan = model.plan(x.shape[0])
    assert rel_error(plan.eager(labkit.xp.asarray(x)).get(), want) < 1e-4
    plan.x[...] = labkit.xp.asarray(x)
    assert rel_error(plan.run().get(), want) < 1e-4


def test_a_new_candidate_list_makes_a_new_key():
    """A winner found among other candidates is not looked up for a longer list (new tiles offered)."""
    a = [{"tiles": 1}, {"tiles": 2}]
    assert candidates_hash(a) == candidates_hash([dict(c) for c in a])
    assert candidates_hash(a) != candidates_hash(a + [{"tiles": 3}])
