"""MobileNetV2's weights: a safe reader of an ONNX file's initializers, and where the notebook's come from.

    weights = read_onnx_weights("mobilenet_v2.onnx")   # torchvision state_dict names -> float32 arrays
    weights, source = load_weights()                    # $LABKIT_MOBILENET_ONNX, else the synthetic ones

An ONNX file is a protobuf message: parsing it builds data and runs no code (unlike a pickle).  The
reader still trusts nothing in it:

* the file's size is checked before it is read (at most ``max_bytes``); an empty, truncated or
  malformed message is refused with the parser's reason;
* only the graph's **initializers** (the stored tensors) are read: the nodes, the computation the
  file describes, are never looked at, let alone run;
* every initializer must carry one of torchvision's ``state_dict`` names, with its shape and dtype
  (float32); missing, unexpected, repeated or misshapen tensors are named in the error.  A file
  exported from torchvision's ``mobilenet_v2`` with ``do_constant_folding=False`` keeps those names;
  one whose BN was folded by the exporter (``onnx::Conv_...``) is refused, and says so;
* tensors stored as *external data* (a side file) are read by the ONNX importer's reader
  (labkit.models.onnx_import.reader.external_bytes): the side file must be a relative path inside
  the ONNX file's folder (no absolute path, no ``..``, no link out of the folder), and offset and
  length must lie within it and match the tensor's size.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import WeightFileError
from .mobilenet_v2 import parameter_shapes, synthetic_weights
from .onnx_import.reader import external_bytes, onnx_module

__all__ = ["ONNX_ENV", "MAX_BYTES", "read_onnx_weights", "load_weights", "WeightFileError"]

ONNX_ENV = "LABKIT_MOBILENET_ONNX"   # where a MobileNetV2 ONNX file is, if anywhere
MAX_BYTES = 256 << 20                # the FP32 network is 14 MB; room for files with extra graph data


def read_onnx_weights(path: str | os.PathLike, *, num_classes: int = 1000,
                      max_bytes: int = MAX_BYTES) -> dict[str, np.ndarray]:
    """The initializers of a MobileNetV2 ONNX file as {torchvision name: float32 array}, every name,
    shape and dtype checked (see the module docstring); WeightFileError for anything else."""
    onnx = onnx_module()
    path = Path(path)
    if not path.is_file():
        raise WeightFileError(f"{path}: no such file")
    size = path.stat().st_size
    if size > max_bytes:
        raise WeightFileError(f"{path}: {size:,} bytes, over the {max_bytes:,} a MobileNetV2 file needs: refused "
                              "before reading it")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:   # the protobuf parser's DecodeError and friends: the file is not a model
        raise WeightFileError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc}); "
                              "truncated or not ONNX?") from None
    want = parameter_shapes(num_classes)
    inits = list(model.graph.initializer)
    if not inits:
        raise WeightFileError(f"{path}: the graph stores no initializers (no weights)")
    names = [t.name for t in inits]
    unexpected = [n for n in names if n not in want]
    if unexpected:
        hint = (" (names like 'onnx::Conv_...': the exporter folded BN away; export with do_constant_folding=False)"
                if any(n.startswith("onnx::") for n in unexpected) else "")
        raise WeightFileError(f"{path}: {len(unexpected)} initializers are not torchvision mobilenet_v2 parameters, "
                              f"e.g. {unexpected[:3]}{hint}")
    counts = Counter(names)       # one pass: a name repeated 40,000 times must not cost 40,000^2 steps
    repeated = sorted(n for n, k in counts.items() if k > 1)
    if repeated:
        raise WeightFileError(f"{path}: initializers stored twice: {repeated[:3]}")
    missing = [n for n in want if n not in counts]
    if missing:
        raise WeightFileError(f"{path}: {len(missing)} parameters are missing, e.g. {missing[:3]}")
    out: dict[str, np.ndarray] = {}
    for t in inits:
        shape = tuple(int(d) for d in t.dims)
        if shape != want[t.name]:
            raise WeightFileError(f"{path}: {t.name!r} has shape {shape}, expected {want[t.name]}")
        if t.data_type != onnx.TensorProto.FLOAT:
            dt = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in onnx.TensorProto.DataType.values() \
                else str(t.data_type)
            raise WeightFileError(f"{path}: {t.name!r} is {dt}, expected FLOAT (float32)")
        nbytes = 4 * int(np.prod(shape))
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raw = external_bytes(t, path.parent, nbytes)
        elif t.raw_data:
            raw = t.raw_data
        else:
            raw = np.asarray(t.float_data, dtype=np.float32).tobytes()
        if len(raw) != nbytes:
            raise WeightFileError(f"{path}: {t.name!r} holds {len(raw)} bytes, its shape {shape} needs {nbytes}")
        a = np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)   # a copy: owned, writeable
        if not np.isfinite(a).all():
            raise WeightFileError(f"{path}: {t.name!r} holds NaN or infinity")
        out[t.name] = a
    return out


def load_weights(path: str | os.PathLike | None = None) -> tuple[dict[str, np.ndarray], str]:
    """(weights, where they came from): ``path``, else ``$LABKIT_MOBILENET_ONNX``, names an ONNX file
    (read_onnx_weights); with neither, the seeded synthetic weights, and the source says so."""
    path = path or os.environ.get(ONNX_ENV)
    if path:
        return read_onnx_weights(path), f"ONNX file {path}"
    return synthetic_weights(), "synthetic weights (seed 2018): they classify nothing"
