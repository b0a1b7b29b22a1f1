"""Schedule knobs of Triton kernels: the space, the default point, the constraints."""

from __future__ import annotations

import math

from ...ir.dtypes import DType
from ...ir.graph import Op
from ..backend import Knob, Schedule
from ..kernel import Kernel, Space

# shared memory per block on the GPUs we target (bytes)
SMEM_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
LAUNCH_OPTIONS = ("num_warps", "num_stages")
# per kind: the knobs that are compile-time arguments of the generated function, in its argument order
CONSTEXPRS = {"elementwise": ("BLOCK",), "reduction": ("ROWS", "BLOCK"),
              "contraction": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "PRECISION")}


def npow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def split_ok(k: Kernel) -> bool:
    """Split-K partial sums are added atomically: only when the output is the plain float32 sum."""
    red = k.contraction.red
    epilogue = [o for i, o in enumerate(k.ops) if o.space is Space.row and i != red]
    return (len(k.outputs) == 1 and k.outputs[0][1].dtype is DType.float32
            and all(o.op is Op.Contiguous for o in epilogue))


def kind_of(k: Kernel) -> str:
    """How the kernel is emitted: "contraction" (tl.dot, of float products), "reduction" (int32 products
    too) or "elementwise" (gathers too)."""
    if k.contraction is not None and k.ops[k.contraction.mul].dtype.is_float:
        return "contraction"
    return "reduction" if k.reduce_axes else "elementwise"


def _rows_rlen(k: Kernel) -> tuple[int, int]:
    rlen = math.prod(k.full[d] for d in k.reduce_axes)
    return math.prod(k.full) // max(rlen, 1), rlen


def space(k: Kernel) -> list[Knob]:
    kind = kind_of(k)
    warps = Knob("num_warps", (1, 2, 4, 8))
    if kind == "elementwise":
        return [Knob("BLOCK", (64, 128, 256, 512, 1024, 2048, 4096)), warps]
    if kind == "reduction":
        return [Knob("BLOCK", (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)),
                Knob("ROWS", (1, 2, 4, 8, 16, 32, 64)), warps]
    plan = k.contraction
    knobs = [Knob("BLOCK_M", (16, 32, 64, 128, 256)), Knob("BLOCK_N", (16, 32, 64, 128, 256)),
             Knob("BLOCK_K", (16, 32, 64, 128)), Knob("GROUP_M", (1, 4, 8, 16)),
             Knob("num_warps", (2, 4, 8)), Knob("num_stages", (1, 2, 3, 4, 5)),
             Knob("SPLIT_K", (1, 2, 4, 8, 16) if split_ok(k) else (1,))]
    if k.ops[plan.mul].dtype is DType.float32:
        knobs.append(Knob("PRECISION", ("ieee", "tf32")))
    return knobs


def default(k: Kernel) -> Schedule:
    kind = kind_of(k)
    if kind == "elementwise":
        block = min(1024, max(32, npow2(math.prod(k.full))))
        return {"BLOCK": block, "num_warps": max(1, min(8, block // 256))}
    if kind == "reduction":
        rows, rlen = _rows_rlen(k)
        block = min(2048, max(16, npow2(rlen)))
        nrow = min(npow2(rows), max(1, 1024 // block))
        return {"BLOCK": block, "ROWS": nrow, "num_warps": max(1, min(8, block * nrow // 256))}
    plan = k.contraction
    return {"BLOCK_M": min(64, max(16, npow2(plan.size("m")))), "BLOCK_N": min(64, max(16, npow2(plan.size("n")))),
            "BLOCK_K": min(32, max(16, npow2(plan.size("k")))), "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
            "SPLIT_K": 1, "PRECISION": "ieee"}


def shared_memory(k: Kernel, s: Schedule) -> int:
    """Estimated shared memory of a contraction's pipelined operand tiles (0 for other kinds)."""
    if kind_of(k) != "contraction":
        return 0
    item = k.ops[k.contraction.mul].dtype.itemsize
    return (s["BLOCK_M"] * s["BLOCK_K"] + s["BLOCK_K"] * s["BLOCK_N"]) * item * max(1, s["num_stages"])


def valid(k: Kernel, s: Schedule, arch: int = 80) -> bool:
    kind = kind_of(k)
    names = {kn.name: kn.choices for kn in space(k)}
    full = {kn: s.get(kn) for kn in names}
    if any(v is None or v not in names[kn] for kn, v in full.items() if kn != "PRECISION") or \
            ("PRECISION" in names and s.get("PRECISION", "ieee") not in names["PRECISION"]):
        return False
    if kind == "elementwise":
        return s["BLOCK"] >= 32 * s["num_warps"]
    if kind == "reduction":
        rows, rlen = _rows_rlen(k)
        return s["ROWS"] * s["BLOCK"] <= 16384 and s["ROWS"] <= npow2(rows)
    plan = k.contraction
    if s["BLOCK_M"] * s["BLOCK_N"] > 128 * 32 * s["num_warps"]:
        return False
    if s["SPLIT_K"] > 1 and (not split_ok(k) or plan.size("k") < s["BLOCK_K"] * s["SPLIT_K"]):
        return False
    return shared_memory(k, s) <= SMEM_LIMIT.get(arch, SMEM_LIMIT[80])


def grid(k: Kernel, s: Schedule) -> tuple[int, int, int]:
    kind = kind_of(k)
    if kind == "elementwise":
        return (-(-math.prod(k.full) // s["BLOCK"]), 1, 1)
    if kind == "reduction":
        rows, _ = _rows_rlen(k)
        return (-(-rows // s["ROWS"]), 1, 1)
    plan = k.contraction
    tiles = -(-plan.size("m") // s["BLOCK_M"]) * -(-plan.size("n") // s["BLOCK_N"])
    return (tiles * plan.size("batch"), 1, s.get("SPLIT_K", 1))


def needs_zeroed_output(k: Kernel, s: Schedule) -> bool:
    return kind_of(k) == "contraction" and s.get("SPLIT_K", 1) > 1


def constexprs(k: Kernel, s: Schedule) -> dict:
    """The schedule knobs that are compile-time arguments of the generated function."""
    kind = kind_of(k)
    d = {key: s[key] for key in CONSTEXPRS[kind] if key in s}
    if kind == "contraction":
        d.setdefault("PRECISION", "ieee")
    return d
