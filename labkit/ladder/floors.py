"""Every step of a course network beside its roofline floor: where the time goes, and how far each
piece is from what the device allows (benchmarks/roofline.py, and notebooks 07, 08, 10 and 11).

    steps, costs, notes, model = build_case("alexnet", "fp32", 64, rng)   # tuned first on a GPU
    rows = measure_case("alexnet", "fp32", 64, ceilings)                   # one row per step
    rows = shipped_case("alexnet", "fp32", 1024)                           # a GPU's stored rows
    print(table(rows))

A step is one entry of the network's plan (``model.plan(N).steps``; the small ResNet's training step
is ``ResNetSmall.step_list``, kernel by kernel).  Its cost is the model's ``step_costs(N)``: FLOPs and
the least bytes (each input, weight and bias read once, the output written once); its floor the larger
of bytes at the copy bandwidth and FLOPs at the GEMM peak of the precision it runs in
(labkit.measure.roofline).  In a TF32 network only the implicit-GEMM convolutions run on the tensor
cores (``tensor_core_steps``); the other steps' floors use the FP32 peak.
"""
from __future__ import annotations

import re
import time

import numpy as np

from .. import autotune, backends, measure
from ..device_query import device
from ..measure import roofline as rf
from ..models import alexnet, fashion_mnist as fm, mobilenet_v2 as mb
from ..models.autotuning import tune
from ..models.resnet_small import ResNetSmall
from ..results import shipped

__all__ = ["TITLES", "NETS", "build_case", "floor_rows", "measure_case", "shipped_case", "table", "case_label",
           "tensor_core_steps", "tuning_note", "SHIPPED_GPUS"]

NETS = ("fashion", "alexnet", "alexnet_auto", "resnet", "mobilenet", "mobilenet_auto")
TITLES = {"fashion": "FashionNet", "alexnet": "AlexNet", "alexnet_auto": "AlexNet (auto convolutions)",
          "resnet": "ResNet-small training step", "mobilenet": "MobileNetV2",
          "mobilenet_auto": "MobileNetV2 (auto depthwise kernels)"}
RESNET_CHANNELS = {"gpu": 64, "cpu": 4}
MOBILENET_HW = {"gpu": mb.INPUT_HW, "cpu": (32, 32)}
LR, MOMENTUM, WD = 0.05, 0.9, 5e-4
# The GPUs whose roofline runs are shipped (benchmarks/results/roofline_<gpu>.json), newest first.
SHIPPED_GPUS = ("h200", "h100")


def tensor_core_steps(net: str, names: list[str], N: int | None = None) -> list[str]:
    """The steps that take a TF32 network's precision: its implicit-GEMM convolutions (AlexNet's five;
    MobileNetV2's stem, expansions, projections and head), and AlexNet's dense layers at a batch of
    ``N`` from alexnet.TF32_DENSE_ROWS.  Depthwise, pooling, LRN and softmax kernels are plain FP32 in
    either network, and so are the other dense layers."""
    if net == "alexnet":
        dense = N is not None and N >= alexnet.TF32_DENSE_ROWS
        return [n for n in names if re.fullmatch(r"conv\d", n) or (dense and re.fullmatch(r"fc\d", n))]
    if net == "mobilenet":
        return [n for n in names if n in ("stem", "head") or n.endswith((".expand", ".project"))]
    return []


def tuning_note(decisions: list, seconds: float, gpu: bool) -> dict:
    """Where a case's kernel configurations came from (labkit.autotune.history rows): counts by source."""
    if not gpu:
        return {"note": "CPU executor: nothing is tuned"}
    sources: dict[str, int] = {}
    for d in decisions:
        sources[d["source"]] = sources.get(d["source"], 0) + 1
    return {"seconds": round(seconds, 2), "decisions": len(decisions), "sources": sources}


def build_case(net: str, precision: str, N: int, rng, *, model=None):
    """(steps [(name, fn)], {name: Cost}, notes, the model) of one case, its inputs filled with random
    data (a plan's buffers start as NaN, and a kernel may run at another speed on NaN).  On a GPU the
    autotuner's winners for this GPU and batch come first: ``labkit.tune`` (a search, or the disk
    cache's), the ResNet by one training step with the autotuner searching.  ``model``: an instance
    of the network to use (a notebook's own), else one is made (synthetic or shipped weights)."""
    if net not in NETS:
        raise ValueError(f"net must be one of {NETS}, got {net!r}")
    if precision not in ("fp32", "tf32"):
        raise ValueError(f"precision must be 'fp32' or 'tf32', got {precision!r}")
    xp = backends.xp()
    gpu = backends.current() == "cuda"
    where = "gpu" if gpu else "cpu"
    before, start = len(autotune.history()), time.perf_counter()
    if net == "resnet":
        model = model or ResNetSmall(RESNET_CHANNELS[where], seed=0)
        x = xp.asarray(rng.random((N, model.in_channels, *model.input_hw), dtype=np.float32))
        labels = xp.asarray(rng.integers(0, 10, N).astype(np.int32))
        if gpu:
            with autotune.forced("on"):
                model.train_step(x, labels, lr=LR, momentum=MOMENTUM, weight_decay=WD)
            xp.cuda.get_current_stream().synchronize()
        steps = model.step_list(x, labels, lr=LR, momentum=MOMENTUM, weight_decay=WD)
        notes = {"channels": model.channels, "input_hw": list(model.input_hw), "backward": model.backward,
                 "tensor_core_steps": [],
                 "autotune": tuning_note(autotune.history()[before:], time.perf_counter() - start, gpu)}
        return steps, model.step_costs(N), notes, model
    if net == "fashion":
        model, notes = model or fm.FashionNet(fm.load_weights()), {"variant": "fused"}
        fill = lambda shape: rng.random(shape, dtype=np.float32)                       # noqa: E731
    elif net in ("alexnet", "alexnet_auto"):     # the second: each convolution on labkit.conv2d's auto choice
        if model is None:
            weights, source = alexnet.load_weights()
            convs = "auto" if net == "alexnet_auto" else "implicit"
            model, notes = alexnet.AlexNet(weights, precision=precision, convs=convs), {"weights": source}
        else:
            notes = {"weights": "the caller's"}
        fill = lambda shape: (50 * rng.standard_normal(shape)).astype(np.float32)      # noqa: E731  (0-255 scale)
    else:
        # the second: each depthwise layer on the autotuner's choice of depthwise.cu or depthwise_any.cu
        dw = "auto" if net == "mobilenet_auto" else "tiled"
        model = model or mb.MobileNetV2(mb.synthetic_weights(), input_hw=MOBILENET_HW[where], precision=precision,
                                        depthwise=dw)
        notes = {"input_hw": list(model.input_hw), "weights": "synthetic (seed 2018)"}
        fill = lambda shape: rng.standard_normal(shape, dtype=np.float32)              # noqa: E731
    if gpu:
        report = tune(model, [N], progress=False)
        notes["autotune"] = tuning_note(report.decisions, report.seconds, gpu)
    else:
        notes["autotune"] = tuning_note([], 0.0, gpu)
    plan = model.plan(N)
    plan.x[...] = xp.asarray(fill(plan.x.shape))
    notes["tensor_core_steps"] = tensor_core_steps(net, [name for name, _ in plan.steps], N) \
        if precision == "tf32" else []
    return list(plan.steps), model.step_costs(N), notes, model


def floor_rows(net: str, precision: str, N: int, steps, costs: dict, ceilings: dict, bd, notes: dict) -> list[dict]:
    """One row per step of the breakdown ``bd`` (labkit.measure.breakdown over ``steps``): its cost, floor,
    bound, measured time and % of floor."""
    missing = [name for name, _ in steps if name not in costs]
    if missing:
        raise RuntimeError(f"{net}: steps without a cost: {missing}")
    out = []
    tensor_cores = set(notes["tensor_core_steps"])
    for part in bd.parts:
        c = costs[part.name]
        fp = precision if part.name in tensor_cores else "fp32"
        out.append({"network": net, "precision": precision, "batch": N, "step": part.name, "kernel": None,
                    "flops": c.flops, "bytes": c.bytes, "intensity": c.intensity, "floor_precision": fp,
                    "floor_ms": rf.floor_ms(c, ceilings, fp), "bound": rf.bound(c, ceilings, fp),
                    "measured_ms": part.median_ms,
                    "percent_of_floor": rf.percent_of_floor(part.median_ms, c, ceilings, fp),
                    **{k: v for k, v in notes.items() if k != "tensor_core_steps"}})
    return out


def measure_case(net: str, precision: str, N: int, ceilings: dict, *, repeat: int = 10, warmup: int = 2,
                 seed: int = 0, model=None) -> list[dict]:
    """``build_case`` then each step timed alone (labkit.measure.breakdown): the rows, each with the
    device.  ``ceilings``: {copy_GBps, fp32_TFLOPs[, tf32_TFLOPs]} (a TF32 case needs the last)."""
    steps, costs, notes, model = build_case(net, precision, N, np.random.default_rng(seed), model=model)
    bd = measure.breakdown([(name, "kernel", fn) for name, fn in steps], warmup=warmup, repeat=repeat)
    return [dict(r, device=device().label) for r in floor_rows(net, precision, N, steps, costs, ceilings, bd, notes)]


def shipped_case(net: str, precision: str, N: int, gpu: str | None = None) -> list[dict]:
    """The stored rows of one case from the shipped roofline run of ``gpu`` ("h200", "h100"), else of
    the first of SHIPPED_GPUS that has the case; each row with its device.  [] where none has it."""
    for tag in ([gpu] if gpu else SHIPPED_GPUS):
        try:
            doc = shipped(f"roofline_{tag}.json")
        except FileNotFoundError:
            continue
        rows = [dict(r, device=r.get("device") or doc.get("device")) for r in doc["rows"]
                if r["network"] == net and r["precision"] == precision and r["batch"] == N]
        if rows:
            return rows
    return []


def case_label(r: dict) -> str:
    return f"{TITLES[r['network']]} {r['precision'].upper()} batch {r['batch']:,}"


def table(rows: list[dict], *, sort: bool = True, top: int | None = None) -> str:
    """The rows as text, slowest step first (``sort``; ``top``: only that many, the rest counted), with
    the sum of all of them: the time, the floor, % of it."""
    sel = sorted(rows, key=lambda r: -r["measured_ms"]) if sort else list(rows)
    rest = sel[top:] if top is not None else []
    sel = sel[:top] if top is not None else sel
    total = sum(r["measured_ms"] for r in rows)
    width = max([len(r["step"]) for r in rows] + [9])
    lines = [f"{'step':<{width}s} {'ms':>9s} {'share':>6s} {'floor ms':>9s} {'bound':>14s} {'% floor':>8s}"]
    for r in sel:
        bound = r["bound"] + (" (TF32)" if r["floor_precision"] == "tf32" else "")
        lines.append(f"{r['step']:<{width}s} {r['measured_ms']:9.4f} {100 * r['measured_ms'] / total:5.1f}% "
                     f"{r['floor_ms']:9.4f} {bound:>14s} {r['percent_of_floor']:7.1f}%")
    if rest:
        ms = sum(r["measured_ms"] for r in rest)
        lines.append(f"{f'{len(rest)} more':<{width}s} {ms:9.4f} {100 * ms / total:5.1f}%")
    floor = sum(r["floor_ms"] for r in rows)
    lines.append(f"{'all steps':<{width}s} {total:9.4f} {100.0:5.1f}% {floor:9.4f} {'':>14s} "
                 f"{100 * floor / total:7.1f}%")
    return "\n".join(lines)
