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

--seeds 0 1 2 3 instead trains, for each seed (initial parameters and batch order), labkit with its
direct kernels only, labkit as tuned (Winograd where this GPU's table says it pays) and PyTorch, and
writes each one's test accuracy per epoch to train_seeds_c<channels>.json: how far float32 rounding
alone moves the accuracy after a few epochs.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder import training  # noqa: E402
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
                warmup_steps=args.warmup, mirror=args.mirror, progress=False)


def compare_seeds(args) -> int:
    rows = []
    for seed in args.seeds:
        common = fit_settings(args, seed)
        row = {"seed": seed}
        for name, winograd in (("labkit_direct", False), ("labkit_tuned", None)):
            net = ResNetSmall(args.channels, seed=seed, winograd=winograd)
            row[name] = training.fit(net, weight_decay=args.weight_decay, graph=True, **common)["test_accuracy"]
        row["torch"] = train_peer("torch", ResNetSmall(args.channels, seed=seed).state(), args.weight_decay,
                                  common)[0]["test_accuracy"]
        rows.append(row)
        print(f"seed {seed}: test accuracy after {args.epochs} epochs: " +
              ", ".join(f"{k} {row[k][-1]:.4f}" for k in ("labkit_direct", "labkit_tuned", "torch")), flush=True)
    path = measure.save_rows(rows, Path(args.out) / f"train_seeds_c{args.channels}.json",
                             meta={"script": "train_resnet", **vars(args), "device": labkit.device().label})
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
    ap.add_argument("--framework", default="labkit", choices=FRAMEWORKS)
    ap.add_argument("--out", default="results/train")
    ap.add_argument("--seeds", type=int, nargs="+", help="compare labkit direct, labkit tuned and PyTorch over these "
                    "seeds (needs a GPU with PyTorch)")
    args = ap.parse_args()
    if args.seeds:
        return compare_seeds(args)
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
