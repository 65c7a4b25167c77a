"""The convolution zoo's benchmark and GPU check (benchmarks/conv_zoo.py, benchmarks/conv_zoo_check.py):
the zoo spans the space it claims and stays within its memory budget, its FLOPs and samplers count what
they say (the float64 samples agree with labkit.reference.layers), the check's random cases reach every
value they claim; both scripts' plumbing end to end on this backend (where labkit has the general
convolution API), and on a GPU the check's quick subset."""
from __future__ import annotations

import importlib.util
import inspect
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import labkit

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    """A script of benchmarks/ as a module (conv_zoo_check imports conv_zoo by its name)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


zoo = load("conv_zoo")
check = load("conv_zoo_check")


def api_missing() -> str | None:
    """None where labkit has conv2d(dilation=, variant="auto") and conv_transpose2d; else what is missing."""
    if not hasattr(labkit, "conv_transpose2d"):
        return "labkit.conv_transpose2d does not exist yet"
    if "dilation" not in inspect.signature(labkit.conv2d).parameters:
        return "labkit.conv2d takes no dilation yet"
    return None


def of_kind(kind: str) -> list:
    return [p for p in zoo.ZOO if p.kind == kind]


def test_the_zoo_spans_the_space():
    assert len(zoo.ZOO) >= 40
    assert len({p.id for p in zoo.ZOO}) == len(zoo.ZOO)
    assert {p.kind for p in zoo.ZOO} == set(zoo.KINDS)
    assert all(sum(p.kind == k for p in zoo.ZOO) >= 4 for k in zoo.KINDS)
    stages = [s for p in zoo.ZOO for s in p.stages]
    assert {p.N for p in zoo.ZOO} <= set(range(8, 65)) and {8, 64} <= {p.N for p in zoo.ZOO}
    assert min(s.C for s in stages) == 3 and max(s.C for s in stages) == 512
    assert min(min(p.stages[0].H, p.stages[0].W) for p in zoo.ZOO) >= 128
    assert max(p.stages[0].H for p in zoo.ZOO) == 1024
    assert {(k, k) for k in (3, 5, 7, 9, 11)} <= {p.stages[0].kernel for p in of_kind("dense")}
    assert {(1, 7), (7, 1), (3, 5), (5, 7), (5, 9), (3, 1), (3, 7)} <= {p.stages[0].kernel for p in of_kind("rect")}
    assert {(2, 2), (3, 3), (1, 2)} <= {p.stages[0].dilation for p in of_kind("dilated")}
    assert {(2, 2), (3, 3), (4, 4), (1, 2)} <= {p.stages[0].stride for p in of_kind("strided")}
    t = [p.stages[0] for p in of_kind("transposed")]
    assert {2, 3, 4} <= {s.kernel[0] for s in t if s.stride == (2, 2)}
    assert any(s.output_padding != (0, 0) for s in t) and any(s.dilation != (1, 1) for s in t)
    assert any(s.groups > 1 for s in t)
    d = [p.stages[0] for p in of_kind("depthwise")]
    assert all(s.groups == s.C for s in d)
    assert {3, 5, 7} <= {s.kernel[0] for s in d if s.kernel[0] == s.kernel[1]}
    assert any(s.kernel[0] != s.kernel[1] for s in d)
    assert any(s.pad == (0, 0) for s in d) and any(s.pad != (0, 0) for s in d)
    assert {(1, 1), (2, 2)} <= {s.stride for s in d} and any(s.dilation != (1, 1) for s in d)
    assert all(len(p.stages) == 2 and p.stages[0].groups == p.stages[0].C and p.stages[1].kernel == (1, 1)
               for p in of_kind("separable"))
    assert {2, 4, 32} <= {p.stages[0].groups for p in of_kind("grouped")}
    assert any(p.N == 16 and p.stages[0].C == 64 and p.stages[0].M == 128 and p.stages[0].H == 1024
               for p in of_kind("pointwise"))


def test_every_problem_fits_its_memory_budget_and_has_an_output():
    for p in zoo.ZOO:
        assert all(min(s.out_hw) >= 1 for s in p.stages), p.id
        assert all(s.C % s.groups == 0 and s.M % s.groups == 0 for s in p.stages), p.id
        if "over the 6 GB budget" not in p.note:
            assert p.working_set_bytes < 6.5e9, (p.id, p.working_set_bytes)
        assert 0.2 < zoo.rough_h100_ms(p) < 50, (p.id, zoo.rough_h100_ms(p))


def test_a_transposed_problem_counts_its_adjoints_products():
    for p in of_kind("transposed"):
        s = p.stages[0]
        ho, wo = s.out_hw
        adjoint = zoo.Conv(s.M, ho, wo, s.C, s.kernel, s.stride, s.pad, s.dilation, s.groups)
        assert adjoint.out_hw == (s.H, s.W), p.id
        assert adjoint.flops(p.N) == s.flops(p.N), p.id
        assert adjoint.w_shape == s.w_shape, p.id      # PyTorch's ConvTranspose2d keeps its conv's weights


def test_the_float64_samples_agree_with_the_reference():
    rng = np.random.default_rng(3)
    done = 0
    while done < 60:
        transposed = bool(rng.random() < 0.5)
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (tuple(int(v) for v in rng.integers(lo, hi, 2))
                                                  for lo, hi in ((1, 7), (1, 5), (0, 5), (1, 4)))
        g = int(rng.choice([1, 2, 3]))
        op = (int(rng.integers(0, max(sh, dh))), int(rng.integers(0, max(sw, dw)))) if transposed else (0, 0)
        s = zoo.Conv(g * int(rng.integers(1, 4)), int(rng.integers(1, 12)), int(rng.integers(1, 12)),
                     g * int(rng.integers(1, 4)), (kh, kw), (sh, sw), (ph, pw), (dh, dw), g, transposed, op)
        if min(s.out_hw) < 1:
            continue
        N = int(rng.integers(1, 3))
        x, w, b = rng.standard_normal(s.x_shape(N)), rng.standard_normal(s.w_shape), rng.standard_normal(s.M)
        act = rng.choice(np.array([None, "relu", "tanh"], dtype=object))
        ref, terms = zoo.full_reference(s, x, w, b, act)
        assert ref.shape == s.y_shape(N)
        idx = zoo.sample_idx(np, ref.size, 64, done)
        r, t = zoo.stage_samples(np, s, x, w, b, idx, act)
        np.testing.assert_allclose(r, ref.reshape(-1)[idx], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(t, terms.reshape(-1)[idx], rtol=1e-12, atol=1e-12)
        done += 1


def test_the_check_reaches_every_value_it_claims():
    cases = list(check.EDGE) + check.random_cases(300, 0)
    assert len(cases) >= 300
    cov = check.coverage(cases)
    for axis in ("h", "w"):
        assert set(range(1, 12)) <= set(cov[f"kernel_{axis}"])
        assert set(range(1, 6)) <= set(cov[f"stride_{axis}"])
        assert set(range(0, 6)) <= set(cov[f"pad_{axis}"])
        assert {1, 2, 3} <= set(cov[f"dilation_{axis}"])
    assert cov["transposed"] >= 60 and cov["depthwise"] >= 30 and cov["grouped"] >= 20
    assert cov["output_padding"] >= 10 and 100 <= cov["bias"] <= len(cases) - 100
    assert all(n >= 20 for n in cov["activations"].values())
    assert all(check.valid(c) for c in cases)
    assert all(check.small_enough(c) for c in cases if c.phase == "random")
    assert all(check.macs(c) <= 1e8 for c in cases)        # the float64 reference: well under a second
    assert check.random_cases(20, 0) == check.random_cases(20, 0)      # seeded: a failure reproduces


def test_the_checks_shapes_are_pytorchs():
    for c in list(check.EDGE) + check.random_cases(30, 1):
        x, w, b = check.host_arrays(c, 0)
        ref, _ = zoo.full_reference(c.conv, x, w, b, c.activation)
        assert ref.shape == c.conv.y_shape(c.N), c.id


def test_the_large_cases_pass_int32_offsets():
    for c in check.LARGE:
        assert max(math.prod(c.conv.x_shape(c.N)), math.prod(c.conv.y_shape(c.N))) >= 2**31, c.id


def test_the_benchmarks_plumbing_runs_here(tmp_path):
    why = api_missing()
    if why:
        pytest.skip(f"{why}: benchmarks/conv_zoo.py --smoke needs it")
    assert zoo.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("conv_zoo_smoke_*.json")
    rows = json.loads(path.read_text())["rows"]
    assert [r["id"] for r in rows] == [p.id for p in zoo.SMOKE] and all(r["ok"] for r in rows)
    assert list(tmp_path.glob("conv_zoo_smoke_*.png"))


def test_merge_keeps_a_later_part_and_the_earlier_tf32_rows_it_did_not_run(tmp_path):
    """--merge: a later part replaces a row; where it ran without TF32 rows, the earlier part's TF32
    numbers stay, marked with the run they come from."""
    why = api_missing()
    if why:
        pytest.skip(f"{why}: benchmarks/conv_zoo.py --smoke needs it")
    assert zoo.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("conv_zoo_smoke_*.json")
    doc = json.loads(path.read_text())
    first = dict(doc, date="2026-01-01", meta=dict(doc["meta"], tf32=True))
    first["rows"] = [dict(r, labkit_tf32_ms=2.0, cudnn_tf32_ms=1.0, ratio_tf32=2.0) for r in doc["rows"]]
    later = dict(doc, meta=dict(doc["meta"], tf32=False))
    later["rows"] = [dict(r, labkit_ms=123.0) for r in doc["rows"][:1]]
    a, b = tmp_path / "a" / "first.json", tmp_path / "b" / "later.json"
    for f, d in ((a, first), (b, later)):
        f.parent.mkdir()
        f.write_text(json.dumps(d))
    zoo.merge([str(a), str(b)], tmp_path / "merged")
    (merged,) = (tmp_path / "merged").glob("conv_zoo_*.json")
    rows = {r["id"]: r for r in json.loads(merged.read_text())["rows"]}
    one, two = rows[doc["rows"][0]["id"]], rows[doc["rows"][1]["id"]]
    assert one["labkit_ms"] == 123.0 and one["ratio_tf32"] == 2.0 and one["tf32_run"]["tf32_rows"] is True
    assert two["labkit_ms"] == doc["rows"][1]["labkit_ms"] and "tf32_run" not in two


def test_the_checks_plumbing_runs_here(tmp_path):
    why = api_missing()
    if why:
        pytest.skip(f"{why}: benchmarks/conv_zoo_check.py needs it")
    assert check.main(["--cases", "4", "--no-edge", "--autotune-cases", "0", "--no-large", "--out", str(tmp_path)]) == 0


@pytest.mark.gpu
def test_the_quick_check_passes_on_the_gpu(tmp_path):
    why = api_missing()
    if why:
        pytest.skip(f"{why}: benchmarks/conv_zoo_check.py needs it")
    assert check.main(["--quick", "--pool", "--out", str(tmp_path)]) == 0
