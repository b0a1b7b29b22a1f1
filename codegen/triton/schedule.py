"""Schedule knobs of Triton kernels: one typed schedule per kind of kernel, the default point, the
constraints."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ...ir.dtypes import DType
from ...ir.graph import Op
from ..kernel import Contraction, Form, Kernel, Space
from ..knobs import Knob, KnobValue, Schedule, knob, parse, to_json
from ..knobs import space as knobs_of

# shared memory per block on the GPUs we target (bytes)
SMEM_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
# per kind: the knobs that are compile-time arguments of the generated function, in its argument order
CONSTEXPRS = {Form.elementwise: ("BLOCK",), Form.reduction: ("ROWS", "BLOCK"),
              Form.contraction: ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "PRECISION")}


def npow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def plan_of(k: Kernel) -> Contraction:
    """The matmul reading of a kernel emitted as a contraction."""
    c = k.contraction
    if c is None:
        raise ValueError("not a contraction kernel")
    return c


def split_ok(k: Kernel) -> bool:
    """Split-K partial sums are added atomically: only when the output is the plain float32 sum."""
    red = plan_of(k).red
    epilogue = [o for i, o in enumerate(k.ops) if o.space is Space.row and i != red]
    return (len(k.outputs) == 1 and k.outputs[0][1].dtype is DType.float32
            and all(o.op is Op.Contiguous for o in epilogue))


def kind_of(k: Kernel) -> Form:
    """How the kernel is emitted: a contraction (tl.dot, of float products), a reduction (int32 products
    too) or elementwise (gathers too)."""
    if k.contraction is not None and k.ops[k.contraction.mul].dtype.is_float:
        return Form.contraction
    return Form.reduction if k.reduce_axes else Form.elementwise


def _rows_rlen(k: Kernel) -> tuple[int, int]:
    rlen = math.prod(k.full[d] for d in k.reduce_axes)
    return math.prod(k.full) // max(rlen, 1), rlen


def _knob(choices: Callable[[Kernel], tuple[KnobValue, ...]], optional: bool = False,
          universe: tuple[KnobValue, ...] | None = None) -> Any:
    return knob(choices, optional=optional, universe=universe)


Precision = Literal["ieee", "tf32"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
_WARPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class ElementwiseSchedule:
    BLOCK: int = _knob(lambda k: (64, 128, 256, 512, 1024, 2048, 4096))
    num_warps: int = _knob(lambda k: _WARPS)


@dataclass(frozen=True)
class ReductionSchedule:
    BLOCK: int = _knob(lambda k: (16, 32, 64, 128, 256, 512, 1024, 2048, 4096))
    ROWS: int = _knob(lambda k: (1, 2, 4, 8, 16, 32, 64))
    num_warps: int = _knob(lambda k: _WARPS)


def _precisions(k: Kernel) -> tuple[Precision, ...]:
    return PRECISIONS if k.ops[plan_of(k).mul].dtype is DType.float32 else ()


@dataclass(frozen=True)
class ContractionSchedule:
    BLOCK_M: int = _knob(lambda k: (16, 32, 64, 128, 256))
    BLOCK_N: int = _knob(lambda k: (16, 32, 64, 128, 256))
    BLOCK_K: int = _knob(lambda k: (16, 32, 64, 128))
    GROUP_M: int = _knob(lambda k: (1, 4, 8, 16))
    num_warps: int = _knob(lambda k: (2, 4, 8))
    num_stages: int = _knob(lambda k: (1, 2, 3, 4, 5))
    SPLIT_K: int = _knob(lambda k: (1, 2, 4, 8, 16) if split_ok(k) else (1,))
    # float32 products only; a schedule stored before the knob existed runs as "ieee"
    PRECISION: Literal["ieee", "tf32"] | None = _knob(_precisions, optional=True, universe=PRECISIONS)


TritonSchedule = ElementwiseSchedule | ReductionSchedule | ContractionSchedule
_TYPES: dict[Form, type[TritonSchedule]] = {Form.elementwise: ElementwiseSchedule, Form.reduction: ReductionSchedule,
                                            Form.contraction: ContractionSchedule}


def space(k: Kernel) -> list[Knob]:
    return knobs_of(_TYPES[kind_of(k)], k)


def typed(k: Kernel, s: Schedule, choices: bool = False) -> TritonSchedule | None:
    """The typed schedule of a stored one, or None where it is not one of ``k``'s: knobs missing, or (with
    ``choices``) outside their choices (a default may lie outside them); names of no knob are ignored."""
    return parse(_TYPES[kind_of(k)], s, k, strict=False, choices=choices)


def typed_default(k: Kernel) -> TritonSchedule:
    kind = kind_of(k)
    if kind is Form.elementwise:
        block = min(1024, max(32, npow2(math.prod(k.full))))
        return ElementwiseSchedule(BLOCK=block, num_warps=max(1, min(8, block // 256)))
    if kind is Form.reduction:
        rows, rlen = _rows_rlen(k)
        block = min(2048, max(16, npow2(rlen)))
        nrow = min(npow2(rows), max(1, 1024 // block))
        return ReductionSchedule(BLOCK=block, ROWS=nrow, num_warps=max(1, min(8, block * nrow // 256)))
    plan = plan_of(k)
    return ContractionSchedule(
        BLOCK_M=min(64, max(16, npow2(plan.size("m")))), BLOCK_N=min(64, max(16, npow2(plan.size("n")))),
        BLOCK_K=min(32, max(16, npow2(plan.size("k")))), GROUP_M=8, num_warps=4, num_stages=3, SPLIT_K=1,
        PRECISION="ieee")


def default(k: Kernel) -> Schedule:
    return to_json(typed_default(k))


def _shared_memory(k: Kernel, s: ContractionSchedule) -> int:
    item = k.ops[plan_of(k).mul].dtype.itemsize
    return (s.BLOCK_M * s.BLOCK_K + s.BLOCK_K * s.BLOCK_N) * item * max(1, s.num_stages)


def shared_memory(k: Kernel, s: Schedule) -> int:
    """Estimated shared memory of a contraction's pipelined operand tiles (0 for other kinds)."""
    t = typed(k, s)
    if t is None:
        raise ValueError(f"not a schedule of this kernel: {s}")
    return _shared_memory(k, t) if isinstance(t, ContractionSchedule) else 0


def fits(k: Kernel, s: TritonSchedule, arch: int = 80) -> bool:
    """The constraints past each knob's choices: registers, shared memory, split-K."""
    if isinstance(s, ElementwiseSchedule):
        return 32 * s.num_warps <= s.BLOCK
    if isinstance(s, ReductionSchedule):
        rows, _ = _rows_rlen(k)
        return s.ROWS * s.BLOCK <= 16384 and npow2(rows) >= s.ROWS
    plan = plan_of(k)
    if 128 * 32 * s.num_warps < s.BLOCK_M * s.BLOCK_N:
        return False
    if s.SPLIT_K > 1 and (not split_ok(k) or plan.size("k") < s.BLOCK_K * s.SPLIT_K):
        return False
    return _shared_memory(k, s) <= SMEM_LIMIT.get(arch, SMEM_LIMIT[80])


def valid(k: Kernel, s: Schedule, arch: int = 80) -> bool:
    t = typed(k, s, choices=True)
    return t is not None and fits(k, t, arch)


def grid(k: Kernel, s: TritonSchedule) -> tuple[int, int, int]:
    if isinstance(s, ElementwiseSchedule):
        return (-(-math.prod(k.full) // s.BLOCK), 1, 1)
    if isinstance(s, ReductionSchedule):
        rows, _ = _rows_rlen(k)
        return (-(-rows // s.ROWS), 1, 1)
    plan = plan_of(k)
    tiles = -(-plan.size("m") // s.BLOCK_M) * -(-plan.size("n") // s.BLOCK_N)
    return (tiles * plan.size("batch"), 1, s.SPLIT_K)


def needs_zeroed_output(s: TritonSchedule) -> bool:
    return isinstance(s, ContractionSchedule) and s.SPLIT_K > 1


def constexprs(k: Kernel, s: TritonSchedule, native_dot: bool = True) -> dict[str, int | str | bool]:
    """The compile-time arguments of the generated function: the schedule's knobs, and for a contraction whether
    it takes the device's 16-bit dot (``native_dot``; the interpreter's bf16 dot is wrong)."""
    d: dict[str, int | str | bool] = {key: getattr(s, key) for key in CONSTEXPRS[kind_of(k)]}
    if isinstance(s, ContractionSchedule):
        d["PRECISION"] = s.PRECISION or "ieee"
        d["NATIVE_DOT"] = native_dot
    return d


def launch_options(s: TritonSchedule) -> dict[str, int]:
    """Triton's launch options the schedule sets (warps, pipeline stages)."""
    opts = {"num_warps": s.num_warps}
    if isinstance(s, ContractionSchedule):
        opts["num_stages"] = s.num_stages
    return opts
