"""Trained models of the course, shipped as plain NumPy weights (``data/models/``).

``fashion_mnist``: the ECE408 Spring 2019 Fashion-MNIST network (two tanh
convolutions, two dense layers), with a safe loader and a NumPy reference
forward pass.
"""
from __future__ import annotations

from . import fashion_mnist

__all__ = ["fashion_mnist"]
