"""Data sets of the course: strict IDX and .npz readers, and Fashion-MNIST."""
from __future__ import annotations

from .fashion_mnist import (
    CLASS_NAMES,
    ENV_VAR,
    SYSTEM_DIR,
    load_fashion_mnist,
    resize_images,
    search_paths,
)
from .idx import IDXFormatError, read_idx
from .npz import ArrayFileError, read_npz

__all__ = [
    "CLASS_NAMES",
    "ENV_VAR",
    "SYSTEM_DIR",
    "IDXFormatError",
    "ArrayFileError",
    "read_npz",
    "load_fashion_mnist",
    "read_idx",
    "resize_images",
    "search_paths",
]
