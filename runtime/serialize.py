"""Kernels as JSON (for artifacts): plain data only, never pickle."""

from __future__ import annotations

from typing import Any

from ..codegen.kernel import Buffer, Form, Kernel, KOp, Space, kop_name
from ..errors import LuminalError
from ..ir.dtypes import DType
from ..ir.view import View


def _val(v: Any) -> Any:
    """JSON keeps bools, ints and lists (read back as tuples) apart by itself; floats go as text so that
    inf and nan stay strict JSON; views are tagged."""
    if isinstance(v, View):
        return {"view": [list(v.shape), list(v.strides), v.offset, [[list(c), lo, hi] for c, lo, hi in v.mask]]}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, int):
        return v
    if isinstance(v, tuple | list):
        return [_val(x) for x in v]
    raise TypeError(f"cannot serialise {type(v).__name__}")


def _unval(v: Any) -> Any:
    if isinstance(v, int):
        return v
    if isinstance(v, list):
        return tuple(_unval(e) for e in v)
    if not isinstance(v, dict) or len(v) != 1:
        raise ValueError("bad attribute value")
    (kind, x), = v.items()
    if kind == "view":
        shape, strides, offset, mask = x
        return View(tuple(int(s) for s in shape), tuple(int(s) for s in strides), int(offset),
                    tuple((tuple(int(c) for c in cs), int(lo), int(hi)) for cs, lo, hi in mask))
    if kind == "float" and isinstance(x, str):
        return float(x)
    raise ValueError(f"unknown attribute kind {kind!r}")


def kernel_to_json(k: Kernel) -> dict:
    return {
        "form": k.form, "full": list(k.full), "reduce_axes": list(k.reduce_axes),
        "inputs": [[list(b.shape), b.dtype.value, b.constant] for b in k.inputs],
        "ops": [[o.op, list(o.args), o.dtype.value, o.space, [[n, _val(v)] for n, v in o.attrs]] for o in k.ops],
        "outputs": [[i, list(b.shape), b.dtype.value, b.final] for i, b in k.outputs],
        "input_nodes": list(k.input_nodes), "output_nodes": list(k.output_nodes),
        "sources": [list(s) for s in k.sources],
    }


def kernel_from_json(d: dict) -> Kernel:
    """Rebuild a kernel; anything malformed is a LuminalError."""
    try:
        ops = []
        for op, args, dt, space, attrs in d["ops"]:
            ops.append(KOp(kop_name(op), tuple(int(a) for a in args), DType(dt), Space(space),
                           tuple((str(n), _unval(v)) for n, v in attrs)))
        k = Kernel(Form(d["form"]), tuple(int(s) for s in d["full"]), tuple(int(a) for a in d["reduce_axes"]),
                   tuple(Buffer(tuple(int(s) for s in sh), DType(dt), bool(c)) for sh, dt, c in d["inputs"]),
                   tuple(ops),
                   tuple((int(i), Buffer(tuple(int(s) for s in sh), DType(dt), final=bool(f)))
                         for i, sh, dt, f in d["outputs"]),
                   tuple(int(n) for n in d["input_nodes"]), tuple(int(n) for n in d["output_nodes"]),
                   tuple((str(name), str(op)) for name, op in d.get("sources", [])))
        if any(not 0 <= a < i for i, o in enumerate(ops) for a in o.args):
            raise ValueError("bad kernel structure")
        return k
    except (KeyError, TypeError, ValueError) as e:
        raise LuminalError(f"artifact kernel is malformed: {e}") from None
