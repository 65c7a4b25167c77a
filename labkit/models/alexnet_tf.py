"""AlexNet in TensorFlow (CPU), with the weights in the file's own layouts: an oracle for labkit's
network that shares none of its code.

    logits = alexnet_tf.tensorflow_logits(raw, x)    # raw: read_bvlc_npy / synthetic_weights; x NCHW

TensorFlow's activations are NHWC and its filters (kh, kw, cin/g, cout): exactly the layouts of
``bvlc_alexnet.npy``, and NHWC's flatten of pool5 is the (h, w, c) order of the file's fc6 rows.
So this network uses the weights as stored, and agreeing with it checks labkit's re-layout too
(``alexnet_weights.to_labkit``).  Needs ``tensorflow-cpu`` (the ``reference`` extra).
"""
from __future__ import annotations

import numpy as np

from ..reference.tensorflow_cases import import_tensorflow
from ..shapes import ALEXNET_CONVS
from .alexnet import LRN, LRN_AFTER, POOL_AFTER

__all__ = ["tensorflow_logits"]


def tensorflow_logits(raw: dict[str, tuple[np.ndarray, np.ndarray]], x_nchw: np.ndarray) -> np.ndarray:
    """fc8's logits (N, 1000), float32, computed by TensorFlow on the CPU."""
    tf = import_tensorflow()

    h = tf.constant(np.ascontiguousarray(np.asarray(x_nchw, np.float32).transpose(0, 2, 3, 1)))  # NHWC
    for name, L in ALEXNET_CONVS.items():
        w, b = raw[name]
        if L.pad:
            h = tf.pad(h, [[0, 0], [L.pad, L.pad], [L.pad, L.pad], [0, 0]])
        xs = tf.split(h, L.groups, axis=3)
        ws = tf.split(tf.constant(w), L.groups, axis=3)
        h = tf.concat([tf.nn.conv2d(xi, wi, strides=L.stride, padding="VALID") for xi, wi in zip(xs, ws)], axis=3)
        h = tf.nn.relu(h + b)
        if name in LRN_AFTER:
            h = tf.nn.local_response_normalization(h, **LRN)
        if name in POOL_AFTER:
            h = tf.nn.max_pool2d(h, ksize=3, strides=2, padding="VALID")
    h = tf.reshape(h, (h.shape[0], -1))
    h = tf.nn.relu(h @ raw["fc6"][0] + raw["fc6"][1])
    h = tf.nn.relu(h @ raw["fc7"][0] + raw["fc7"][1])
    return (h @ raw["fc8"][0] + raw["fc8"][1]).numpy()
