"""labkit.pipeline: pinned buffers, the sub-batch pipeline over streams and devices, its timeline.

The same tests run on the CPU executor (CI) and on a GPU (streams really overlap there).  The
pipeline's output is checked three ways: bit for bit against the model run sub-batch by sub-batch
on one stream (the same kernels on the same sub-batches, so nothing may differ), against the whole
batch's forward, and against the float64 NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error
from labkit.models import alexnet
from labkit.models import fashion_mnist as fm
from labkit.pipeline import (SubBatchPipeline, Timeline, copy_bandwidth, copy_in, copy_out, is_pinned, overlap_ms,
                             pinned_empty, plot_timeline, split_batch)

ON_GPU = labkit.backend() == "cuda"


@pytest.fixture(scope="module")
def fashion():
    return fm.FashionNet()


@pytest.fixture(scope="module")
def alex():
    weights, _ = alexnet.load_weights()
    return alexnet.AlexNet(weights)


def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def one_by_one(model, x, chunks):
    """The model's forward on each sub-batch in turn, on the caller's stream: the oracle the pipeline
    must match bit for bit."""
    outs = []
    for a, b in chunks:
        p = model.plan(b - a)
        outs.append(host(p.eager(labkit.xp.asarray(x[a:b]))).copy())
    return np.concatenate(outs)


def poisoned_output(shape):
    out = pinned_empty(shape)
    out[...] = np.nan
    return out


@pytest.mark.check
@pytest.mark.parametrize("N, sub, expected", [
    (8, 4, [(0, 4), (4, 8)]),
    (10, 4, [(0, 4), (4, 8), (8, 10)]),                 # a remainder
    (3, 8, [(0, 3)]),                                   # one sub-batch, smaller than asked
    (40, [4, 8, 16], [(0, 4), (4, 12), (12, 28), (28, 40)]),   # a ramp, its last size repeated
])
def test_split_batch(N, sub, expected):
    assert split_batch(N, sub) == expected


@pytest.mark.check
@pytest.mark.parametrize("N, sub", [(0, 4), (5, 0), (5, []), (5, [4, -1]), (5, 2.5), (5, True)])
def test_split_batch_refuses(N, sub):
    with pytest.raises(ValueError):
        split_batch(N, sub)


@pytest.mark.check
@pytest.mark.parametrize("streams, sub_batch, devices", [(3, 8, None), (2, [3, 5, 11], None), (2, 7, 2),
                                                         (1, 37, None)])
def test_fashion_pipeline_matches_one_by_one_and_reference(fashion, streams, sub_batch, devices):
    rng = np.random.default_rng()
    N = 37                                              # odd: the last sub-batch is a remainder
    x = pinned_empty((N, 1, 48, 48))
    x[...] = rng.random(x.shape, dtype=np.float32)
    if ON_GPU and devices == 2:
        devices = [0, 0]                                # two replicas on one GPU: the multi-device path
    pipe = SubBatchPipeline(fashion, streams=streams, sub_batch=sub_batch, devices=devices)
    out = poisoned_output((N, 10))
    got = pipe.run(x, out)
    assert got is out and not np.isnan(out).any()
    assert np.array_equal(out, one_by_one(fashion, x, pipe.chunks(N)))
    whole = host(fashion(labkit.xp.asarray(x)))
    assert rel_error(out, whole) < 1e-5
    ref = reference.softmax(fm.reference_logits(fashion.host_weights, x))
    assert rel_error(out, ref) < 1e-5
    again = pipe.run(x, poisoned_output((N, 10)))       # plans reused: same answer on a second call
    assert np.array_equal(again, out)


@pytest.mark.parametrize("graphs", [True, False])
def test_alexnet_pipeline_with_remainder_matches_serial(alex, graphs):
    rng = np.random.default_rng()
    N = labkit.sizes(gpu=[67], cpu=[5])[0]
    sub = labkit.sizes(gpu=[16], cpu=[2])[0]
    photos = alexnet.preprocess(alexnet.load_photos()[0])       # real images (softmax not saturated)
    x = pinned_empty((N,) + alexnet.INPUT_SHAPE)
    x[...] = photos[rng.integers(0, len(photos), N)]   # in a fresh random order (noise would saturate softmax)
    pipe = SubBatchPipeline(alex, streams=2, sub_batch=sub, graphs=graphs)
    out = pipe.run(x, poisoned_output((N, 1000)))
    assert not np.isnan(out).any()
    assert np.array_equal(out, one_by_one(alex, x, pipe.chunks(N)))
    serial = pipe.serial(x, poisoned_output((N, 1000)))     # the whole batch at once: other split-K sums
    assert rel_error(out, serial) < 2e-4
    # Both against the float64 reference.  The synthetic weights' logits are large (hundreds), so the
    # softmax magnifies float32 rounding of the logits: 1e-4 of a probability near 1 is about 3 ulp of
    # a logit of 300, and runs reached 1.2e-4 (LRN's beta = 0.75 by two reciprocal square roots is a
    # few ulp): 2e-4, about 6 ulp of such a logit.
    idx = rng.choice(N, 3, replace=False)
    ref = reference.softmax(alexnet.reference_logits(alex.host_weights, x[idx]))
    assert rel_error(out[idx], ref) < 2e-4 and rel_error(serial[idx], ref) < 2e-4


@pytest.mark.check
def test_timeline_has_every_stage_of_every_sub_batch(fashion):
    N = 23
    x = pinned_empty((N, 1, 48, 48))
    x[...] = 0.5
    pipe = SubBatchPipeline(fashion, streams=2, sub_batch=6)
    tl = Timeline()
    pipe.run(x, timeline=tl)
    rows = tl.rows()
    chunks = pipe.chunks(N)
    assert sorted((r["chunk"], r["stage"]) for r in rows) == sorted(
        (i, s) for i in range(len(chunks)) for s in ("H2D", "forward", "D2H"))
    for r in rows:
        assert 0 <= r["start_ms"] <= r["end_ms"]
    by_chunk = {(r["chunk"], r["stage"]): r for r in rows}
    for i in range(len(chunks)):                         # on one stream the stages of a sub-batch are ordered
        assert by_chunk[(i, "H2D")]["end_ms"] <= by_chunk[(i, "forward")]["start_ms"] + 1e-3
        assert by_chunk[(i, "forward")]["end_ms"] <= by_chunk[(i, "D2H")]["start_ms"] + 1e-3
    assert {r["lane"] for r in rows} == {lane.name for lane in pipe.lanes}
    fig = plot_timeline(rows, title="test")
    assert len(fig.axes[0].patches) == len(rows)
    if not ON_GPU:                                       # the CPU executor runs the stages one at a time
        assert overlap_ms(rows, "H2D", "forward") == 0.0


@pytest.mark.check
def test_overlap_ms_counts_only_common_time():
    rows = [{"device": 0, "stage": "H2D", "start_ms": 0.0, "end_ms": 2.0},
            {"device": 0, "stage": "H2D", "start_ms": 1.0, "end_ms": 3.0},     # overlaps the first: union 0-3
            {"device": 0, "stage": "forward", "start_ms": 2.5, "end_ms": 5.0},
            {"device": 1, "stage": "forward", "start_ms": 0.0, "end_ms": 9.0}]  # another device: never counted
    assert overlap_ms(rows, "H2D", "forward") == pytest.approx(0.5)


def bad_call(case):
    """(x, out, the exception) of one kind of bad call."""
    good = pinned_empty((4, 1, 48, 48))
    if case == "out aliases x":                          # out lies inside x's memory
        return good, good.reshape(-1)[:40].reshape(4, 10), ValueError
    return {
        "list": ([[0.0]], None, TypeError),
        "float64": (np.zeros((4, 1, 48, 48)), None, TypeError),
        "shape": (np.zeros((4, 1, 28, 28), np.float32), None, ValueError),
        "empty batch": (np.zeros((0, 1, 48, 48), np.float32), None, ValueError),
        "not contiguous": (np.zeros((4, 1, 48, 96), np.float32)[..., ::2], None, ValueError),
        "out shape": (good, np.zeros((4, 9), np.float32), ValueError),
        "out dtype": (good, np.zeros((4, 10), np.float64), ValueError),
    }[case]


@pytest.mark.parametrize("case", ["list", "float64", "shape", "empty batch", "not contiguous", "out shape",
                                  "out dtype", "out aliases x"])
def test_bad_input_gets_a_clear_error(fashion, case):
    pipe = SubBatchPipeline(fashion, streams=2, sub_batch=2)
    x, out, exc = bad_call(case)
    with pytest.raises(exc):
        pipe.run(x, out)
    with pytest.raises(exc):
        pipe.serial(x, out)


@pytest.mark.parametrize("kwargs", [dict(streams=0), dict(streams=1.5), dict(sub_batch=0), dict(sub_batch=[]),
                                    dict(devices=0)])
def test_bad_settings_refused(fashion, kwargs):
    with pytest.raises(ValueError):
        SubBatchPipeline(fashion, **kwargs)


@pytest.mark.check
def test_not_a_model_refused():
    with pytest.raises(TypeError, match="labkit model"):
        SubBatchPipeline(object())


def test_every_device_of_the_host_says_what_it_used(fashion):
    pipe = SubBatchPipeline(fashion, devices="all")
    text = pipe.describe(10)
    if ON_GPU:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
        assert len(pipe.devices) == n
        if n == 1:
            assert "one GPU" in text
    else:
        assert "CPU executor" in text


@pytest.mark.check
def test_pinned_buffers_and_bandwidth_rows():
    a = pinned_empty((3, 5), np.float32)
    assert a.shape == (3, 5) and a.dtype == np.float32
    assert is_pinned(a) == ON_GPU
    assert not is_pinned(np.empty(1000, np.float32))
    with pytest.raises(ValueError):
        pinned_empty((-1, 2))
    rows = copy_bandwidth([4096, 1 << 16], pinned=True, repeat=2, warmup=1)
    assert [(r["direction"], r["bytes"]) for r in rows] == [("H2D", 4096), ("D2H", 4096), ("H2D", 1 << 16),
                                                            ("D2H", 1 << 16)]
    assert all(r["GBps"] > 0 and r["median_ms"] > 0 for r in rows)
    with pytest.raises(ValueError):
        copy_bandwidth([0], pinned=False)


def test_tune_keeps_the_fastest_schedule_and_stays_correct(fashion):
    N = 21
    x = pinned_empty((N, 1, 48, 48))
    x[...] = np.random.default_rng().random(x.shape, dtype=np.float32)
    pipe = SubBatchPipeline(fashion, streams=2)
    cands = pipe.candidates(N)
    assert N in cands and [2, 6] in cands               # one sub-batch (serial) and a ramp are tried
    rows = pipe.tune(x, candidates=[N, 7, [3, 9]], repeat=1, warmup=0)
    assert [r["median_ms"] for r in rows] == sorted(r["median_ms"] for r in rows)
    assert pipe.chunks(N) == split_batch(N, rows[0]["schedule"])
    out = pipe.run(x, poisoned_output((N, 10)))
    assert np.array_equal(out, one_by_one(fashion, x, pipe.chunks(N)))
    y = pinned_empty((5, 1, 48, 48))                    # another N after tuning: its plans are made again
    y[...] = x[:5]
    assert np.array_equal(pipe.run(y), one_by_one(fashion, y, pipe.chunks(5)))


@pytest.mark.check
def test_check_enqueue_accepts_the_right_order_and_names_wrong_sub_batches(fashion):
    from labkit.ladder.streams import check_enqueue
    from labkit.pipeline import copy_in, copy_out

    def right(plan, x, out, a, b, stream):
        copy_in(plan.x, x[a:b], stream)
        plan.run(stream)
        copy_out(out[a:b], plan.out, stream)

    def copies_out_too_early(plan, x, out, a, b, stream):
        copy_in(plan.x, x[a:b], stream)
        copy_out(out[a:b], plan.out, stream)
        plan.run(stream)

    def forgets_the_copy_out(plan, x, out, a, b, stream):
        copy_in(plan.x, x[a:b], stream)
        plan.run(stream)

    assert check_enqueue(right, fashion, 11)["ok"]
    early = check_enqueue(copies_out_too_early, fashion, 11)
    assert not early["ok"] and "sub-batch 2 (rows 6-8" in early["message"] and "differ" in early["message"]
    never = check_enqueue(forgets_the_copy_out, fashion, 11)
    assert not never["ok"] and never["message"].count("never written") == 4


def pipeline_state(pipe, sizes):
    """What a tune may change, as a caller sees it: the schedule of each batch size, and each lane's
    plans (the same objects)."""
    return [pipe.chunks(n) for n in sizes], [dict(lane.plans) for lane in pipe.lanes]


@pytest.mark.parametrize("candidates, repeat, message", [
    ([], 1, "non-empty list"), ([0], 1, "candidate 0"), ([7, [3, -1]], 1, r"candidate \[3, -1\]"),
    ([7, "9"], 1, "candidate '9'"), (7, 1, "list of schedules"), ([7], 0, "repeat")])
def test_a_refused_tune_changes_nothing(fashion, candidates, repeat, message):
    # tune(candidates=[]) was an IndexError; tune(candidates=[0]) left 0 as N's schedule, and every
    # later run of N failed.
    N = 21
    x = pinned_empty((N, 1, 48, 48))
    x[...] = np.random.default_rng().random(x.shape, dtype=np.float32)
    pipe = SubBatchPipeline(fashion, streams=2)
    pipe.tune(x, candidates=[7, [3, 9]], repeat=1, warmup=0)
    pipe.run(x[:5].copy())
    before = pipeline_state(pipe, (N, 5))
    with pytest.raises(ValueError, match=message):
        pipe.tune(x, candidates=candidates, repeat=repeat, warmup=0)
    assert pipeline_state(pipe, (N, 5)) == before
    out = pipe.run(x, poisoned_output((N, 10)))
    assert np.array_equal(out, one_by_one(fashion, x, pipe.chunks(N)))


def test_a_tune_that_fails_while_timing_puts_everything_back(fashion, monkeypatch):
    from labkit.pipeline import sub_batch
    N = 21
    x = pinned_empty((N, 1, 48, 48))
    x[...] = np.random.default_rng().random(x.shape, dtype=np.float32)
    y = x[:5].copy()
    pipe = SubBatchPipeline(fashion, streams=2)
    expected = {n: pipe.run(a).copy() for n, a in ((N, x), (5, y))}
    before = pipeline_state(pipe, (N, 5))
    timed, real_times_ms = [], sub_batch.times_ms

    def fails_on_the_second_candidate(fn, **kw):
        if timed:
            raise RuntimeError("the second candidate failed")
        timed.append(real_times_ms(fn, **kw))      # the first one ran: its new plans exist
        return timed[-1]

    monkeypatch.setattr(sub_batch, "times_ms", fails_on_the_second_candidate)
    with pytest.raises(RuntimeError, match="second candidate"):
        pipe.tune(x, candidates=[4, 6], repeat=1, warmup=0)
    assert timed and pipeline_state(pipe, (N, 5)) == before     # the plans of 4 and 1 are gone
    for n, a in ((N, x), (5, y)):
        out = pipe.run(a, poisoned_output((n, 10)))
        assert np.array_equal(out, expected[n]) and np.array_equal(out, one_by_one(fashion, a, pipe.chunks(n)))


@pytest.mark.check
def test_an_enqueue_recorded_on_stand_ins_is_replayed_on_the_real_pipeline():
    """labkit.pipeline.recording, as the grader runs notebook 09's my_enqueue: the function runs on
    stand-ins that record its calls, and check_enqueue replays them on the real plans and stream; a
    wrong order is caught, a record no stand-in could make is refused."""
    from labkit.errors import RecordingError
    from labkit.ladder.streams import check_enqueue
    from labkit.models.fashion_mnist import FashionNet
    from labkit.pipeline.recording import record_enqueue

    def right(plan, x, out, a, b, stream):
        copy_in(plan.x, x[a:b], stream)
        plan.run(stream)
        copy_out(out[a:b], plan.out, stream)

    def late(plan, x, out, a, b, stream):
        copy_in(plan.x, x[a:b], stream)
        copy_out(out[a:b], plan.out, stream)
        plan.run(stream)

    def across(fn, forged=None):
        def call(*args):
            raise AssertionError("a function that runs in another process is never called with live objects")
        # the notebook's namespace is the function's globals, where copy_in and copy_out record
        call.record = lambda kind, jobs: forged if forged is not None else record_enqueue(fn, fn.__globals__, jobs)
        return call

    assert check_enqueue(across(right), FashionNet(), 7)["ok"]
    wrong = check_enqueue(across(late), FashionNet(), 7)
    assert not wrong["ok"] and "sub-batch 0 (rows 0-2" in wrong["message"], wrong["message"]
    forged = [[["copy_in", {"array": "np.ones", "index": []}, {"array": "x", "index": []}, None]]] * 3
    with pytest.raises(RecordingError, match="does not know"):
        check_enqueue(across(right, forged), FashionNet(), 7)


def test_pipeline_describe_counts_in_the_right_number():
    from labkit.models.fashion_mnist import FashionNet
    one = SubBatchPipeline(FashionNet(), streams=1, sub_batch=4)
    assert one.describe(3).startswith("batch 3: 1 sub-batch (3) on 1 stream per device;")
    many = SubBatchPipeline(FashionNet(), streams=2, sub_batch=2)
    assert many.describe(5).startswith("batch 5: 3 sub-batches (2, 2, 1) on 2 streams per device;")
    one.release(); many.release()
