"""torchvision's CNNs exported with torch.onnx.export, run by labkit.import_onnx, against PyTorch in the
same run: top-1 and logits on the same images, then eager and CUDA-graph times at each batch size.

    python benchmarks/onnx_torchvision.py [--models resnet18 alexnet ...] [--batches 1 64] [--images 64]
                                          [--hw 224] [--repeat 20] [--out results/benchmarks] [--check-only]

Each network is made with ``weights=None`` (seeded random weights; the batch normalization statistics
randomized too, so that folding them is tested), exported at batch 1 with a dynamic batch axis
(opset 17), imported, and checked on ``--images`` random images: top-1 equal to PyTorch's and
max |logit difference| / max |logit| <= 1e-4, both in FP32 (TF32 off in PyTorch; labkit's kernels are
FP32).  Then, per batch size: labkit eager (model(x)) and as one CUDA graph (model.plan(N).run()),
PyTorch eager and as a CUDA graph (cuDNN's autotuner on), and labkit's per-layer table at the largest
batch.  A network that fails (export, import, a mismatch, a crash) is recorded with its error and
the next one runs.  Writes onnx_torchvision.json (the device named in it), again after each network,
so that a run cut short keeps what it finished.

The first run on a GPU autotunes every convolution shape at each batch size (labkit.autotune: each
search ends after LABKIT_AUTOTUNE_BUDGET seconds, 6 by default; the winners are cached on disk, so
a second run only looks them up).  LABKIT_AUTOTUNE=0 runs the untuned defaults instead.

Needs torch, torchvision and onnx.  On the CPU executor (no GPU) only the check runs, at batch 2 and
the ``--hw`` given (e.g. 64: the executor is slow); its times are not GPU times and are not taken.
"""
from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.checks import to_numpy  # noqa: E402

MODELS = ("resnet18", "alexnet", "vgg11_bn", "mobilenet_v2", "squeezenet1_1", "googlenet", "densenet121")
TOLERANCE = 1e-4     # max |logit difference| / max |logit|
OPSET = 17


def make_model(torch, torchvision, name: str, seed: int):
    """torchvision's network ``name`` with seeded random weights and batch-norm statistics, in eval mode."""
    torch.manual_seed(seed)
    kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **kw).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def export(torch, model, path: Path, hw: int) -> str:
    """Write the ONNX file; returns which exporter wrote it.  The TorchScript exporter first (it needs
    only onnx), else the torch.export-based one (it needs onnxscript)."""
    x = torch.randn(1, 3, hw, hw)
    args = dict(input_names=["x"], output_names=["y"], opset_version=OPSET)
    try:
        torch.onnx.export(model, (x,), str(path), dynamo=False, dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, **args)
        return "torchscript"
    except TypeError:      # a torch without the dynamo argument: the TorchScript exporter is its only one
        torch.onnx.export(model, (x,), str(path), dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, **args)
        return "torchscript"
    except Exception as first:
        try:
            batch = torch.export.Dim("N", min=1, max=4096)
            torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes={"x": {0: batch}}, **args)
            return "dynamo"
        except Exception as second:
            raise RuntimeError(f"export failed: TorchScript exporter: {first!r}; dynamo exporter: {second!r}") \
                from None


def torch_ms(torch, fn, repeat: int) -> float:
    """Median ms of fn() with CUDA events on PyTorch's stream."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def torch_graph(torch, model, x):
    """(replay, output): the forward pass captured as a CUDA graph on a static input."""
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        out = model(static_x)
    return g.replay, out


def check(torch, model, lab, images: np.ndarray, on_gpu: bool) -> dict:
    """Top-1 and logits of labkit against PyTorch on the same images."""
    with torch.no_grad():
        dev = "cuda" if on_gpu else "cpu"
        theirs = model.to(dev)(torch.as_tensor(images, device=dev)).float().cpu().numpy().astype(np.float64)
    mine = to_numpy(lab(labkit.xp.asarray(images))).astype(np.float64)
    rel = float(np.abs(mine - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    top1 = float((mine.argmax(1) == theirs.argmax(1)).mean())
    return {"images": len(images), "top1_agree": top1, "max_rel_logit_diff": rel,
            "ok": bool(top1 == 1.0 and rel <= TOLERANCE)}


def time_network(torch, model, lab, batch: int, hw: int, repeat: int) -> dict:
    xp = labkit.xp
    x = xp.asarray(np.random.default_rng(batch).standard_normal((batch, 3, hw, hw), dtype=np.float32))
    out = {"batch": batch}
    out["labkit_eager_ms"] = measure.time_fn(lambda: lab(x), repeat=repeat).median_ms
    plan = lab.plan(batch)
    plan.x[...] = x
    out["labkit_graph_ms"] = measure.time_fn(plan.run, repeat=repeat).median_ms
    tx = torch.as_tensor(to_numpy(x), device="cuda")
    with torch.no_grad():
        out["pytorch_eager_ms"] = torch_ms(torch, lambda: model(tx), repeat)
    replay, _ = torch_graph(torch, model, tx)
    out["pytorch_graph_ms"] = torch_ms(torch, replay, repeat)
    out["graph_ratio"] = out["labkit_graph_ms"] / out["pytorch_graph_ms"]
    return out


def run_one(torch, torchvision, name: str, args, folder: Path, on_gpu: bool) -> dict:
    row: dict = {"model": name}
    t0 = time.perf_counter()
    model = make_model(torch, torchvision, name, seed=2018)
    path = folder / f"{name}.onnx"
    row["exporter"] = export(torch, model, path, args.hw)
    row["onnx_mb"] = path.stat().st_size / 1e6
    lab = labkit.import_onnx(path)
    row["steps"] = len(lab.plan(1).steps)
    images = np.random.default_rng(7).standard_normal((args.images, 3, args.hw, args.hw), dtype=np.float32)
    row.update(check(torch, model, lab, images, on_gpu))
    if on_gpu and not args.check_only:
        model = model.cuda()
        row["timings"] = [time_network(torch, model, lab, n, args.hw, args.repeat) for n in args.batches]
        row["layers"] = list(lab.describe(max(args.batches), time=True, repeat=args.repeat))
    row["seconds"] = time.perf_counter() - t0
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--images", type=int, default=None, help="images compared (default 64 on a GPU, 2 on the CPU)")
    ap.add_argument("--hw", type=int, default=None, help="input height and width (default 224 on a GPU, 64 on the CPU)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--check-only", action="store_true", help="compare outputs, time nothing")
    args = ap.parse_args()
    import torch
    import torchvision
    dev = labkit.device()
    on_gpu = dev.is_gpu and torch.cuda.is_available()
    args.images = args.images or (64 if on_gpu else 2)
    args.hw = args.hw or (224 if on_gpu else 64)
    if on_gpu:   # FP32 against FP32: no TF32 in PyTorch's convolutions or matrix multiplies
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    meta = {"benchmark": "onnx_torchvision", "torch": torch.__version__, "torchvision": torchvision.__version__,
            "hw": args.hw, "images": args.images, "batches": args.batches, "tolerance": TOLERANCE, "opset": OPSET,
            "gpu": on_gpu}
    out = Path(args.out) / "onnx_torchvision.json"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            try:
                row = run_one(torch, torchvision, name, args, Path(tmp), on_gpu)
            except Exception as exc:   # one network's failure is recorded; the next one runs
                row = {"model": name, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=8)}
            rows.append(row)
            summary = row.get("error") or (f"top-1 agree {row['top1_agree']:.3f}, max rel logit diff "
                                           f"{row['max_rel_logit_diff']:.2e}")
            print(f"{name:15s} {'ok  ' if row.get('ok') else 'FAIL'} {summary}", flush=True)
            for t in row.get("timings", []):
                print(f"    batch {t['batch']:4d}: labkit eager {t['labkit_eager_ms']:.3f} ms, graph "
                      f"{t['labkit_graph_ms']:.3f} ms; PyTorch eager {t['pytorch_eager_ms']:.3f} ms, graph "
                      f"{t['pytorch_graph_ms']:.3f} ms (graph ratio {t['graph_ratio']:.2f})", flush=True)
            measure.save_rows(rows, out, meta)
            gc.collect()                     # the last network's buffers go before the next is made
            measure.release_gpu_memory()
            if on_gpu:
                torch.cuda.empty_cache()
    print(f"wrote {out}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
