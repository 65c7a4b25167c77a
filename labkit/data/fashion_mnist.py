"""Fashion-MNIST: find and load the IDX files, and resize the images for the course model.

The repository ships both splits (``data/fashion-mnist/``: ``train-*`` and
``t10k-*``); another copy may sit anywhere named by the environment variable
``LABKIT_FASHION_MNIST_DIR``.  See :func:`search_paths` for the order in which
folders are tried.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .idx import read_idx
from ..results import DATA_DIR

__all__ = [
    "CLASS_NAMES",
    "ENV_VAR",
    "SYSTEM_DIR",
    "load_fashion_mnist",
    "resize_images",
    "search_paths",
]

CLASS_NAMES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

ENV_VAR = "LABKIT_FASHION_MNIST_DIR"
REPO_DIR = DATA_DIR / "fashion-mnist"
SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")   # Debian: dataset-fashion-mnist

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def search_paths(folder: str | os.PathLike | None = None) -> list[Path]:
    """The folders :func:`load_fashion_mnist` tries, in order.

    ``folder`` if given (and then only it); otherwise the folder named by the
    environment variable ``LABKIT_FASHION_MNIST_DIR`` (if set), then the
    repository's ``data/fashion-mnist/``, then ``/usr/share/datasets/fashion-mnist``.
    """
    if folder is not None:
        return [Path(folder)]
    paths = []
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        paths.append(Path(env))
    paths += [REPO_DIR, SYSTEM_DIR]
    return paths


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        p = directory / name
        if p.is_file():
            return p
    return None


def load_fashion_mnist(split: str = "test",
                       folder: str | os.PathLike | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Load one split of Fashion-MNIST.

    Args:
        split: ``"test"`` (10,000 images, shipped with the repository) or
            ``"train"`` (60,000 images); both are shipped in data/fashion-mnist/.
        folder: look only in this folder; by default the folders of
            :func:`search_paths` are tried in order.  The files are
            ``{train,t10k}-{images-idx3,labels-idx1}-ubyte``, gzip-compressed
            (``.gz``) or not; both files of a split must be in the same folder.

    Returns:
        ``(images, labels)``: ``uint8 (N, 28, 28)`` and ``uint8 (N,)`` with
        labels in 0..9 (indices into :data:`CLASS_NAMES`).

    Raises:
        ValueError: ``split`` is not "train" or "test", or the files do not hold
            a consistent Fashion-MNIST split (also :class:`IDXFormatError`, a
            ValueError, for malformed files).
        FileNotFoundError: no folder holds both files; the message lists every
            folder tried and how to get the files.
    """
    if split not in _FILES:
        raise ValueError(f'split must be "train" or "test", got {split!r}')
    img_stem, lbl_stem = _FILES[split]
    tried = []
    for d in search_paths(folder):
        img, lbl = _find(d, img_stem), _find(d, lbl_stem)
        if img is not None and lbl is not None:
            break
        if img is None and lbl is None:
            note = "no files" if d.is_dir() else "folder does not exist"
        else:
            note = f"found {(img or lbl).name} but not the {'labels' if img else 'images'} file"
        tried.append(f"  {d}  ({note})")
    else:
        raise FileNotFoundError(
            f"Fashion-MNIST {split} files {img_stem}[.gz] and {lbl_stem}[.gz] not found. "
            "Looked in:\n" + "\n".join(tried) + "\n"
            "To get them: install the Debian package `dataset-fashion-mnist` "
            f"(files go to {SYSTEM_DIR}), or put the four files of the official "
            "release (https://github.com/zalandoresearch/fashion-mnist) in a folder "
            f"and pass folder=... or set the environment variable {ENV_VAR} to it."
        )

    images = read_idx(img)
    labels = read_idx(lbl)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"{img}: expected images of shape (N, 28, 28), found {images.shape}; "
            "is this the images file of Fashion-MNIST?"
        )
    if labels.ndim != 1:
        raise ValueError(
            f"{lbl}: expected labels of shape (N,), found {labels.shape}; "
            "is this the labels file of Fashion-MNIST?"
        )
    if len(images) != len(labels):
        raise ValueError(
            f"{img} holds {len(images):,} images but {lbl} holds {len(labels):,} labels; "
            "the two files must come from the same split"
        )
    if labels.max() > 9:
        bad = int(np.argmax(labels > 9))
        raise ValueError(
            f"{lbl}: labels must be in 0..9, found {int(labels[bad])} at index {bad}"
        )
    return images, labels


def _bilinear_taps(in_size: int, out_size: int):
    """Source indices and weights along one axis (half-pixel centers, as TF2)."""
    f32 = np.float32                      # TensorFlow computes the coordinate in float32
    scale = f32(in_size) / f32(out_size)
    src = (np.arange(out_size, dtype=f32) + f32(0.5)) * scale - f32(0.5)
    floor = np.floor(src)
    lo = np.maximum(floor.astype(np.int64), 0)
    hi = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    frac = (src - floor).astype(np.float32)
    return lo, hi, frac


def resize_images(images: np.ndarray, size: int = 48) -> np.ndarray:
    """Bilinear resize of uint8 images to float32 NCHW in [0, 1].

    Args:
        images: ``uint8 (N, H, W)`` (``(N, 28, 28)`` for Fashion-MNIST).
        size: output height and width.

    Returns:
        ``float32 (N, 1, size, size)``, pixel values divided by 255.  Matches
        ``tf.image.resize(images[..., None], (size, size), method="bilinear",
        antialias=False) / 255`` (half-pixel centers, edge clamping).
    """
    images = np.asarray(images)
    if images.dtype != np.uint8:
        raise TypeError(
            f"images must be uint8 (as loaded by load_fashion_mnist), got {images.dtype}"
        )
    if images.ndim != 3:
        hint = "; add a batch axis with images[None]" if images.ndim == 2 else ""
        raise ValueError(f"images must be 3-D (N, H, W), got shape {images.shape}{hint}")
    if images.size == 0:
        raise ValueError(f"images must not be empty, got shape {images.shape}")
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"size must be an int, got {size!r}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    n, h, w = images.shape
    y0, y1, fy = _bilinear_taps(h, size)
    x0, x1, fx = _bilinear_taps(w, size)
    out = np.empty((n, 1, size, size), dtype=np.float32)
    step = 2048                                   # bounds the temporaries
    for i in range(0, n, step):
        img = images[i:i + step].astype(np.float32)
        left, right = img[:, :, x0], img[:, :, x1]          # (n, H, size)
        rows = left + (right - left) * fx                   # interpolate along x
        top, bottom = rows[:, y0, :], rows[:, y1, :]        # (n, size, size)
        out[i:i + step, 0] = top + (bottom - top) * fy[:, None]
    out *= np.float32(1.0 / 255.0)
    return out
