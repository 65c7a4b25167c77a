"""Train the small ResNet on Fashion-MNIST with labkit's kernels and write the history as JSON.

    python scripts/train_resnet.py [--channels 64] [--epochs 5] [--batch 16] [--lr 0.03] [--schedule cosine]
                                   [--warmup 300] [--mirror] [--eager] [--framework labkit] [--out DIR]

The defaults are the recipe that reaches 90% test accuracy with 64 channels in 5 epochs: small
batches (many steps), a short warmup (larger first steps from the random start diverge), the rate
falling along a cosine.

--framework torch trains the same network in PyTorch on the GPU (labkit.peers.TorchResNetSmall),
--framework tensorflow in TensorFlow on the CPU (labkit.models.resnet_small_tf): the same initial
parameters, the same batches in the same order, the same rate at every step (training.fit_peer).

Prints each epoch's mean training loss, test accuracy and seconds; writes
train_resnet_c<channels>.json (labkit) or train_<framework>_c<channels>.json (the history, the
settings and the device) into --out.

--seeds 0 1 2 3 [--runs labkit_direct labkit_tuned torch] [--repeats 2] [--jobs 4] instead trains,
from each seed (initial parameters and batch order), each kind of run --repeats times: labkit with
its direct kernels only, labkit as tuned (Winograd where this GPU's table says it pays), PyTorch,
TensorFlow.  It writes each run's test accuracy per epoch to train_seeds_c<channels>.json and prints,
for each two kinds, the gaps between their final accuracies seed by seed (and between a kind's two
repeats): how far float32 rounding alone moves the accuracy after a few epochs.

--lockstep trains labkit direct, labkit as tuned, PyTorch in float32 and PyTorch in float64 from
--seed's parameters, one step of each in turn on the same batch, and writes the relative distance
between each two's parameters at log-spaced steps, and each one's test accuracy per epoch, to
train_lockstep_c<channels>.json: how fast rounding differences grow.
"""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder import divergence  # noqa: E402
from labkit.models import training  # noqa: E402
from labkit.models.resnet_small import ResNetSmall  # noqa: E402


FRAMEWORKS = ("labkit", "torch", "tensorflow")
LOSS_EVERY = 25     # the stored loss curve: the mean of each 25 steps (18,750 steps a run at batch 16)


def window_means(values: list, k: int) -> list:
    """The means of consecutive runs of k values (the last run may be shorter)."""
    return [float(sum(values[i:i + k]) / len(values[i:i + k])) for i in range(0, len(values), k)]


def train_peer(framework: str, state: dict, weight_decay: float, common: dict) -> tuple[dict, str]:
    """Train the other framework's copy of the network from ``state``: (history, the device it ran on)."""
    if framework == "torch":
        import torch
        from labkit.peers import TorchResNetSmall
        peer = TorchResNetSmall(state, lr=common["lr"], weight_decay=weight_decay)
        device = f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}"
    else:
        import platform

        from labkit.models.resnet_small_tf import TFResNetSmall
        from labkit.reference.tensorflow_cases import import_tensorflow
        tf = import_tensorflow()
        peer = TFResNetSmall(state, weight_decay=weight_decay)
        device = f"TensorFlow {tf.__version__} on the CPU ({platform.processor() or platform.machine()}, " \
                 f"{len(os.sched_getaffinity(0))} cores)"
    return training.fit_peer(peer, **common), device


def fit_settings(args, seed: int) -> dict:
    """The training settings every framework's run shares (labkit's fit and fit_peer)."""
    return dict(epochs=args.epochs, batch=args.batch, lr=args.lr, seed=seed, schedule=args.schedule,
                warmup_steps=args.warmup, mirror=args.mirror, train_limit=args.train_limit,
                test_limit=args.test_limit, progress=False)


SEED_RUNS = ("labkit_direct", "labkit_tuned", "torch", "tensorflow")


def peer_accuracies(args, framework: str, seed: int, out: Path) -> list:
    """One run of this script for another framework in its own process (several run side by side on
    one GPU): its test accuracy per epoch."""
    cmd = [sys.executable, __file__, "--framework", framework, "--seed", str(seed), "--out", str(out),
           "--channels", str(args.channels), "--epochs", str(args.epochs), "--batch", str(args.batch),
           "--lr", str(args.lr), "--schedule", args.schedule, "--warmup", str(args.warmup),
           "--weight-decay", str(args.weight_decay)] + (["--mirror"] if args.mirror else []) + \
        [f"--{k.replace('_', '-')}={v}" for k, v in (("train_limit", args.train_limit), ("test_limit", args.test_limit))
         if v is not None]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return [r["test_accuracy"] for r in measure.load_rows(out / f"train_{framework}_c{args.channels}.json")]


def compare_seeds(args) -> int:
    """Each kind of run of --runs, from each seed, --repeats times: labkit's in this process, one
    after the other (a repeat shows whether a kind gives the same numbers twice), the other
    frameworks' --jobs at a time in processes of their own."""
    rows, out = [], Path(args.out)
    peers = [(run, seed, rep) for seed in args.seeds for run in args.runs if not run.startswith("labkit")
             for rep in range(args.repeats)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        pending = {pool.submit(peer_accuracies, args, run, seed, out / "seed_runs" / f"{run}_s{seed}_r{rep}"):
                   (run, seed, rep) for run, seed, rep in peers}
        for seed in args.seeds:
            for run in (r for r in args.runs if r.startswith("labkit")):
                for rep in range(args.repeats):
                    net = ResNetSmall(args.channels, seed=seed, winograd=None if run == "labkit_tuned" else False)
                    acc = training.fit(net, weight_decay=args.weight_decay, graph=True, **fit_settings(args, seed))
                    rows.append({"seed": seed, "run": run, "repeat": rep, "test_accuracy": acc["test_accuracy"]})
                    print(f"seed {seed} {run} #{rep}: {acc['test_accuracy'][-1]:.4f}", flush=True)
        for job in as_completed(pending):
            run, seed, rep = pending[job]
            rows.append({"seed": seed, "run": run, "repeat": rep, "test_accuracy": job.result()})
            print(f"seed {seed} {run} #{rep}: {rows[-1]['test_accuracy'][-1]:.4f}", flush=True)
    rows.sort(key=lambda r: (r["seed"], SEED_RUNS.index(r["run"]), r["repeat"]))
    kinds = list(args.runs)
    for a, b in itertools.combinations(kinds, 2):
        g = divergence.seed_gaps(rows, a, b)
        print(f"{a} - {b}, {len(g['seeds'])} seeds: mean {g['mean']:+.2f} points (sd {g['sd']:.2f}), "
              f"largest {g['largest']:.2f}, {g['over_1']} more than a point apart")
    for run in kinds if args.repeats > 1 else []:
        g = divergence.seed_gaps(rows, run, run, repeat_a=1)
        print(f"{run} against itself (a second run): mean {g['mean']:+.2f} points, largest {g['largest']:.2f}, "
              f"{g['over_1']} more than a point apart")
    path = measure.save_rows(rows, out / f"train_seeds_c{args.channels}.json",
                             meta={"script": "train_resnet", **vars(args), "device": labkit.device().label})
    print(f"wrote {path}")
    return 0


def compare_lockstep(args) -> int:
    """labkit direct, labkit as tuned and PyTorch in float32, and PyTorch in float64, from the same
    parameters, step by step on the same batches: how far apart their parameters drift."""
    from labkit.peers import TorchResNetSmall
    state = ResNetSmall(args.channels, seed=args.seed).state()
    trainers = {name: training.LabkitTrainer(ResNetSmall(args.channels, seed=args.seed, winograd=winograd),
                                             weight_decay=args.weight_decay)
                for name, winograd in (("labkit_direct", False), ("labkit_tuned", None))}
    for name, dtype in (("torch", "float32"), ("torch_float64", "float64")):
        trainers[name] = TorchResNetSmall(state, lr=args.lr, weight_decay=args.weight_decay, dtype=dtype)
    settings = {k: v for k, v in fit_settings(args, args.seed).items() if k != "progress"}
    hist = divergence.lockstep(trainers, **settings)
    for pair, d in hist["distance"].items():
        print(f"{pair}: " + ", ".join(f"{s}: {v:.1e}" for s, v in zip(hist["steps"], d) if s in (1, 10, 100, 1000)
                                      or s == hist["steps"][-1]))
    for name, acc in hist["test_accuracy"].items():
        print(f"{name}: test accuracy per epoch " + ", ".join(f"{a:.4f}" for a in acc))
    rows = [{"step": s, **{pair: d[i] for pair, d in hist["distance"].items()}} for i, s in enumerate(hist["steps"])]
    path = measure.save_rows(rows, Path(args.out) / f"train_lockstep_c{args.channels}.json",
                             meta={"script": "train_resnet", **vars(args), "test_accuracy": hist["test_accuracy"],
                                   "device": labkit.device().label})
    print(f"wrote {path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.03)
    ap.add_argument("--schedule", default="cosine", choices=training.SCHEDULES,
                    help="the learning rate: --lr throughout, or falling along a cosine to 0")
    ap.add_argument("--mirror", action="store_true", help="mirror a random half of the images each epoch")
    ap.add_argument("--eager", action="store_true", help="launch each step's kernels from Python (default: "
                    "replay the first step's CUDA graph)")
    ap.add_argument("--warmup", type=int, default=300, help="steps over which the rate rises to --lr")
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-limit", type=int, help="train on the first N training images only (a quick run)")
    ap.add_argument("--test-limit", type=int, help="evaluate on the first N test images only")
    ap.add_argument("--framework", default="labkit", choices=FRAMEWORKS)
    ap.add_argument("--out", default="results/train")
    ap.add_argument("--seeds", type=int, nargs="+", help="compare the --runs over these seeds (PyTorch's runs need a GPU "
                    "with PyTorch)")
    ap.add_argument("--runs", nargs="+", default=["labkit_direct", "labkit_tuned", "torch"], choices=SEED_RUNS,
                    help="with --seeds: the kinds of run")
    ap.add_argument("--repeats", type=int, default=1, help="with --seeds: runs of each kind from each seed")
    ap.add_argument("--jobs", type=int, default=4, help="with --seeds: other frameworks' runs side by side")
    ap.add_argument("--lockstep", action="store_true", help="labkit direct, labkit tuned, PyTorch float32 and "
                    "float64 step by step from --seed: their parameters' distances (needs a GPU with PyTorch)")
    args = ap.parse_args()
    if args.seeds:
        return compare_seeds(args)
    if args.lockstep:
        return compare_lockstep(args)
    net = ResNetSmall(args.channels, seed=args.seed)
    common = fit_settings(args, args.seed)
    if args.framework == "labkit":
        hist = training.fit(net, weight_decay=args.weight_decay, graph=not args.eager, **common)
        device, name = labkit.device().label, f"train_resnet_c{args.channels}.json"
    else:
        hist, device = train_peer(args.framework, net.state(), args.weight_decay, common)
        name = f"train_{args.framework}_c{args.channels}.json"
    for e in range(args.epochs):
        print(f"epoch {e + 1}: loss {hist['epoch_loss'][e]:.4f}, test accuracy {hist['test_accuracy'][e]:.4f}, "
              f"{hist['epoch_seconds'][e]:.1f} s", flush=True)
    rows = [{"epoch": e + 1, **{k: hist[k][e] for k in ("epoch_loss", "test_accuracy", "train_accuracy",
                                                        "epoch_seconds")}} for e in range(args.epochs)]
    path = measure.save_rows(rows, Path(args.out) / name,
                             meta={"script": "train_resnet", **vars(args), "loss_every": LOSS_EVERY,
                                   "step_loss": window_means(hist["step_loss"], LOSS_EVERY), "device": device})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
