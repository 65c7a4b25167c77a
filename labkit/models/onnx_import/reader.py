"""A safe reader of a whole ONNX model: its nodes in an order that runs them, its stored tensors, its
input and output.

    g = read_graph("resnet18.onnx")      # an OnnxGraph: nodes, constants, input, output, opset
    for node in g.nodes: print(node.op, node.name, node.inputs, node.outputs, node.attrs)

An ONNX file is a protobuf message: parsing it builds data and runs no code.  What is in it is still
not trusted:

* the file's size is checked before it is read (``max_bytes``); an empty, truncated or malformed
  message is refused with the parser's reason;
* every stored tensor (initializer, or a Constant node's value) declares dims whose product must
  match the bytes it holds, checked before any array is made from them: a tensor cannot make the
  reader allocate more than the file holds;
* tensors in side files (external data) are read only from a relative path inside the model's
  folder, at an offset and length that lie in that file and match the tensor's size, and all of them
  together count toward ``max_bytes``;
* a node attribute that is a graph (the bodies of If, Loop and Scan), a sparse tensor or a type is
  refused: labkit runs straight-line graphs only;
* names are checked in linear time (one dict pass): a value written twice, read before any node
  writes it, or a cycle among the nodes is refused, naming it.
"""
from __future__ import annotations

import heapq
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import OnnxImportError

__all__ = ["MAX_BYTES", "Node", "OnnxGraph", "read_graph", "tensor_array", "external_bytes", "onnx_module"]

MAX_BYTES = 2 << 30      # protobuf's own limit on one message; VGG-16 in FP32 is 553 MB
# The element types a CNN's tensors come in: float weights, int64 shapes, axes and pads, a bool flag
# (Dropout's training_mode).
_DTYPES = {1: np.dtype("<f4"), 6: np.dtype("<i4"), 7: np.dtype("<i8"), 9: np.dtype("?"), 11: np.dtype("<f8")}
_TYPED_FIELD = {1: "float_data", 6: "int32_data", 7: "int64_data", 9: "int32_data", 11: "double_data"}


def onnx_module():
    """The onnx package (its protobuf classes), or ImportError saying how to install it."""
    try:
        import onnx
    except ImportError as exc:
        raise ImportError("reading an ONNX file needs the onnx package: pip install 'onnx>=1.16'") from exc
    return onnx


@dataclass(frozen=True)
class Node:
    """One node: ``op`` (its op_type), a ``name`` unique in the graph (made up where the file has
    none), value names in and out ("" for an optional input left out), attributes as Python values."""
    op: str
    name: str
    inputs: tuple
    outputs: tuple
    attrs: dict = field(hash=False, compare=False)
    domain: str = ""


@dataclass
class OnnxGraph:
    """What read_graph returns: ``nodes`` in an order that runs them, ``constants`` {name: array} (the
    initializers and Constant nodes' values), the one input's name and dims (an int, or a name or
    None where the file leaves it open), the one output's name, the default domain's opset."""
    path: Path
    nodes: list
    constants: dict
    input_name: str
    input_dims: tuple
    output_name: str
    opset: int


def external_bytes(t, folder: Path, nbytes: int) -> bytes:
    """The bytes of a tensor stored in a side file, after checking where that file is."""
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    if not loc or os.path.isabs(loc) or Path(loc).drive or ".." in Path(loc).parts:
        raise OnnxImportError(f"tensor {t.name!r}: external data location {loc!r} is not a relative path "
                              "inside the ONNX file's folder: refused")
    side = (folder / loc).resolve()
    if folder.resolve() not in side.parents:
        raise OnnxImportError(f"tensor {t.name!r}: external data {loc!r} resolves outside the ONNX file's "
                              f"folder ({side}): refused")
    if not side.is_file():
        raise OnnxImportError(f"tensor {t.name!r}: external data file {loc!r} is missing")
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", nbytes))
    except ValueError:
        raise OnnxImportError(f"tensor {t.name!r}: external data offset or length is not an integer") from None
    size = side.stat().st_size
    if offset < 0 or length != nbytes or offset + length > size:
        raise OnnxImportError(f"tensor {t.name!r}: external data at offset {offset}, length {length} in a "
                              f"{size}-byte file; the tensor needs {nbytes} bytes: refused")
    with open(side, "rb") as f:
        f.seek(offset)
        return f.read(length)


def tensor_array(t, folder: Path, budget: list | None = None) -> np.ndarray:
    """A TensorProto as a NumPy array (a copy, owned), every size checked before it is made:
    dims >= 0 whose product matches the data, float32/64 or int32/64 only.  ``budget``: [bytes left]
    for external data, decreased here."""
    onnx = onnx_module()
    name = t.name or "(unnamed)"
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise OnnxImportError(f"tensor {name!r}: negative dimension in {dims}")
    dt = _DTYPES.get(t.data_type)
    if dt is None:
        kind = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in onnx.TensorProto.DataType.values() \
            else str(t.data_type)
        raise OnnxImportError(f"tensor {name!r} is {kind}: labkit reads FLOAT, DOUBLE, INT32, INT64 and BOOL tensors")
    count = 1
    for d in dims:          # Python ints: a product of huge dims cannot wrap around
        count *= d
    nbytes = count * dt.itemsize
    if t.data_location == onnx.TensorProto.EXTERNAL:
        if budget is not None:
            if nbytes > budget[0]:
                raise OnnxImportError(f"tensor {name!r}: {nbytes:,} bytes of external data, over what is left of "
                                      "the size limit: refused before reading it")
            budget[0] -= nbytes
        raw = external_bytes(t, folder, nbytes)
    elif t.raw_data:
        raw = t.raw_data
    else:
        values = getattr(t, _TYPED_FIELD[t.data_type])
        if len(values) != count:
            raise OnnxImportError(f"tensor {name!r} declares dims {dims} ({count} values) but holds {len(values)}")
        return np.asarray(values, dtype=dt.newbyteorder("=")).reshape(dims)
    if len(raw) != nbytes:
        raise OnnxImportError(f"tensor {name!r} declares dims {dims} ({nbytes:,} bytes) but holds {len(raw):,} bytes")
    return np.frombuffer(raw, dtype=dt).reshape(dims).astype(dt.newbyteorder("="))


def _attrs(node, where: str, folder: Path, budget: list) -> dict:
    onnx = onnx_module()
    A = onnx.AttributeProto
    out = {}
    for a in node.attribute:
        if a.type in (A.GRAPH, A.GRAPHS):
            raise OnnxImportError(f"{where}: attribute {a.name!r} is a graph (a nested graph, as If, Loop and Scan "
                                  "hold): labkit runs straight-line graphs only, refused")
        if a.type == A.FLOAT:
            out[a.name] = float(a.f)
        elif a.type == A.INT:
            out[a.name] = int(a.i)
        elif a.type == A.STRING:
            out[a.name] = a.s.decode("utf-8", "replace")
        elif a.type == A.FLOATS:
            out[a.name] = tuple(float(v) for v in a.floats)
        elif a.type == A.INTS:
            out[a.name] = tuple(int(v) for v in a.ints)
        elif a.type == A.TENSOR:
            out[a.name] = tensor_array(a.t, folder, budget)
        else:
            kind = A.AttributeType.Name(a.type) if a.type in A.AttributeType.values() else str(a.type)
            raise OnnxImportError(f"{where}: attribute {a.name!r} is of type {kind}, which labkit does not read")
    return out


def _dims(value_info) -> tuple:
    t = value_info.type
    if not t.HasField("tensor_type"):
        raise OnnxImportError(f"input {value_info.name!r} is not a tensor")
    if t.tensor_type.elem_type != 1:
        raise OnnxImportError(f"input {value_info.name!r} must be FLOAT (float32), got element type "
                              f"{t.tensor_type.elem_type}")
    if not t.tensor_type.HasField("shape"):
        return ()
    return tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                 for d in t.tensor_type.shape.dim)


def _order(nodes: list, available: set) -> list:
    """The nodes in an order where each runs after those that write its inputs (Kahn's algorithm:
    nodes and edges, times the log of a heap); OnnxImportError for a value nobody writes, or a cycle."""
    writer = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if not o:
                continue
            if o in writer or o in available:
                raise OnnxImportError(f"value {o!r} is written twice (node {n.name!r}): refused")
            writer[o] = i
    waiting = [0] * len(nodes)
    readers: dict[int, list] = {}
    for i, n in enumerate(nodes):
        for v in set(n.inputs):
            if not v or v in available:
                continue
            if v not in writer:
                raise OnnxImportError(f"node {n.name!r} ({n.op}) reads {v!r}, which no node, input or initializer "
                                      "provides")
            waiting[i] += 1
            readers.setdefault(writer[v], []).append(i)
    # The ready nodes in a heap: the earliest in the file goes first, so a file already in order
    # (as exporters write them) keeps its order, and describe() reads like the file.
    ready = [i for i in range(len(nodes)) if waiting[i] == 0]
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in readers.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(nodes):
        stuck = [nodes[i].name for i in range(len(nodes)) if waiting[i]][:3]
        raise OnnxImportError(f"the graph has a cycle (through nodes {stuck}): refused")
    return [nodes[i] for i in order]


def read_graph(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES) -> OnnxGraph:
    """The model in ``path`` as an OnnxGraph, everything checked (the module docstring says what);
    OnnxImportError for anything else."""
    onnx = onnx_module()
    path = Path(path)
    if not path.is_file():
        raise OnnxImportError(f"{path}: no such file")
    size = path.stat().st_size
    if size > max_bytes:
        raise OnnxImportError(f"{path}: {size:,} bytes, over the limit of {max_bytes:,}: refused before reading it")
    if size == 0:
        raise OnnxImportError(f"{path}: an empty file is not an ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:   # the protobuf parser's DecodeError and friends: the file is not a model
        raise OnnxImportError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc}); "
                              "truncated or not ONNX?") from None
    g = model.graph
    if not g.node:
        raise OnnxImportError(f"{path}: the graph has no nodes (truncated, or not a model?)")
    opset = max((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset == 0:
        raise OnnxImportError(f"{path}: the model imports no version of the default ONNX domain")
    if len(g.sparse_initializer):
        raise OnnxImportError(f"{path}: sparse initializers are not read by labkit: refused")
    folder, budget = path.parent, [max_bytes - size]
    counts = Counter(t.name for t in g.initializer)   # one pass: repeated names cannot cost quadratic time
    repeated = sorted(n for n, k in counts.items() if k > 1)
    if repeated:
        raise OnnxImportError(f"{path}: initializers stored twice: {repeated[:3]}")
    constants = {t.name: tensor_array(t, folder, budget) for t in g.initializer}
    inputs = [v for v in g.input if v.name not in constants]
    if len(inputs) != 1 or len(g.output) != 1:
        raise OnnxImportError(f"{path}: labkit runs graphs of one input and one output, this one has "
                              f"{len(inputs)} inputs ({[v.name for v in inputs][:4]}) and {len(g.output)} outputs")
    taken, suffix, nodes = set(), Counter(), []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        base = name
        while name in taken:       # a name the file repeats: made unique (each base's count only grows)
            suffix[base] += 1
            name = f"{base}#{suffix[base] + 1}"
        taken.add(name)
        where = f"node {name!r} ({n.op_type})"
        nodes.append(Node(n.op_type, name, tuple(n.input), tuple(n.output), _attrs(n, where, folder, budget),
                          n.domain))
    ordered = _order(nodes, set(constants) | {inputs[0].name})
    out = g.output[0].name
    if out not in {o for n in nodes for o in n.outputs} and out != inputs[0].name:
        raise OnnxImportError(f"{path}: no node writes the graph's output {out!r}")
    return OnnxGraph(path, ordered, constants, inputs[0].name, _dims(inputs[0]), out, opset)
