"""The small ResNet in TensorFlow (CPU), trained as labkit's step trains it: an oracle that shares
none of labkit's code, and the design's trainer to compare with.

    net = TFResNetSmall(ResNetSmall(16).state(), momentum=0.9, weight_decay=5e-4)
    loss = net.train_batch(images, labels, rate=0.03)     # NumPy in; one SGD step; the loss (float)
    logits = net.logits(images)                          # (N, 10) NumPy
    state = net.state()                                  # the parameters, in the state's layouts

The parameters start from ``state`` (labkit's ``ResNetSmall.state()``: conv weights (M, C, 3, 3),
dense (c, 10)).  TensorFlow's CPU convolutions are NHWC with (kh, kw, C, M) filters, so the images
and weights are turned once here and turned back in ``state()``.  The update is written out rather
than taken from Keras, whose SGD keeps v = m v - lr g: with a rate that changes every step that is a
different method from PyTorch's (and labkit's) v = m v + g + wd p; p -= lr v.  Needs ``tensorflow-cpu``
(the ``reference`` extra).
"""
from __future__ import annotations

import numpy as np

from ..reference.tensorflow_cases import import_tensorflow

__all__ = ["TFResNetSmall", "BLOCKS"]

BLOCKS = ("block1", "block2")


class TFResNetSmall:
    def __init__(self, state: dict, *, momentum: float = 0.9, weight_decay: float = 0.0):
        tf = import_tensorflow()
        self.tf = tf
        self.names = list(state)
        self.p = {k: tf.Variable(self._to_tf(k, v), name=k.replace(".", "_")) for k, v in state.items()}
        self.v = {k: tf.Variable(tf.zeros_like(p)) for k, p in self.p.items()}
        self.rate = tf.Variable(0.0, dtype=tf.float32)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self._step = tf.function(self._train_step)
        self._logits = tf.function(self._forward)

    @staticmethod
    def _to_tf(name: str, v) -> np.ndarray:
        v = np.asarray(v, np.float32)
        return np.ascontiguousarray(v.transpose(2, 3, 1, 0)) if v.ndim == 4 else v    # (M,C,kh,kw) -> HWIO

    def _forward(self, x_nhwc):
        tf, p = self.tf, self.p

        def conv(name, h):
            return tf.nn.conv2d(h, p[f"{name}.w"], strides=1, padding="SAME") + p[f"{name}.b"]
        a = tf.nn.relu(conv("stem", x_nhwc))
        for blk in BLOCKS:
            h = tf.nn.relu(conv(f"{blk}.conv1", a))
            a = tf.nn.relu(conv(f"{blk}.conv2", h) + a)
        return tf.reduce_mean(a, axis=(1, 2)) @ p["fc.w"] + p["fc.b"]

    def _train_step(self, x_nhwc, labels):
        tf = self.tf
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, self._forward(x_nhwc)))
        grads = tape.gradient(loss, [self.p[k] for k in self.names])
        for k, g in zip(self.names, grads):
            v = self.v[k].assign(self.momentum * self.v[k] + g + self.weight_decay * self.p[k])
            self.p[k].assign_sub(self.rate * v)
        return loss

    @staticmethod
    def _nhwc(images) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(images, np.float32).transpose(0, 2, 3, 1))

    def train_batch(self, images: np.ndarray, labels: np.ndarray, rate: float) -> float:
        """One step on a batch (images (N, 1, H, W) float32, labels (N,)) at learning rate ``rate``."""
        self.rate.assign(rate)
        return float(self._step(self._nhwc(images), np.asarray(labels, np.int32)))

    def logits(self, images: np.ndarray) -> np.ndarray:
        return self._logits(self._nhwc(images)).numpy()

    def state(self) -> dict[str, np.ndarray]:
        out = {}
        for k in self.names:
            v = self.p[k].numpy()
            out[k] = v.transpose(3, 2, 0, 1).copy() if v.ndim == 4 else v.copy()
        return out
