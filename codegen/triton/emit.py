"""Triton source from the kernel IR.

One ``@triton.jit`` function named ``kernel`` per Kernel, arguments ``in0..``,
``out0..`` and the schedule's constexpr knobs. Every number in the source is
formatted here; nothing from a model reaches it. ``launch_info`` gives the
launcher what it needs (grid, which buffers to zero first).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...ir.dtypes import DType
from ...ir.graph import Op
from ...ir.view import View, contiguous_strides
from ..index import digits, view_exprs, view_run
from ..kernel import LEAF_OPS, REDUCE_OPS, Form, Kernel, KOp, KOpName, Leaf, Space
from ..knobs import Schedule
from .schedule import (
    CONSTEXPRS,
    ContractionSchedule,
    ReductionSchedule,
    TritonSchedule,
    kind_of,
    plan_of,
    split_ok,
    typed,
)

TL = {
    DType.float32: "tl.float32",
    DType.float16: "tl.float16",
    DType.bfloat16: "tl.bfloat16",
    DType.int64: "tl.int64",
    DType.int32: "tl.int32",
    DType.bool: "tl.int1",
}
_INT_CLAMP = {DType.int32: (-2147483648.0, 2147483520.0), DType.int64: (-9.2e18, 9.2e18)}


def num(value, dtype: DType) -> str:
    """A literal we format ourselves: ints, repr of floats, inf/nan spelled out."""
    if dtype is DType.bool:
        return "1" if value else "0"
    if dtype.is_int:
        return str(int(value))
    f = float(value)
    if math.isnan(f):
        return 'float("nan")'
    if math.isinf(f):
        return 'float("inf")' if f > 0 else '-float("inf")'
    return repr(f)


def _half(dt: DType) -> bool:
    return dt in (DType.float16, DType.bfloat16)


def _as_f32(x: str, dt: DType) -> str:
    """A value as float32 when it is a half precision (Triton computes those in float32)."""
    return f"{x}.to(tl.float32)" if _half(dt) else x


def _from_f32(e: str, dt: DType) -> str:
    """A float32 result as the op's dtype, when that is a half precision."""
    return f"({e}).to({TL[dt]})" if _half(dt) else e


_UNARY: dict[KOpName, str] = {Op.Exp2: "tl.exp2", Op.Log2: "tl.log2", Op.Sin: "tl.sin", Op.Sqrt: "tl.sqrt_rn"}


@dataclass
class Indexing:
    """How one index space is addressed inside the generated function."""

    dims: tuple[int, ...]
    idx: list[str]  # per dim: an expression (a variable name or "0")
    lin: str | None  # linear index expression, or None to build it from idx
    bound: str  # in-bounds mask
    zero: str  # int zeros of the block shape
    block: str  # block shape as a list literal, for tl.full


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 1
        self.n = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def tmp(self, prefix: str = "t") -> str:
        self.n += 1
        return f"{prefix}{self.n}"


class OpEmitter:
    """Emits kernel ops as Triton statements; values are held in their own dtype."""

    def __init__(self, kernel: Kernel, w: Writer, spaces: dict[Space, Indexing], big: bool):
        self.k = kernel
        self.w = w
        self.spaces = spaces
        self.big = big
        self.names: dict[int, str] = {}
        self._lin: dict[Space, str] = {}
        self._idx: dict[tuple, list[str]] = {}

    # -- indexing ----------------------------------------------------------
    def lin(self, space: Space) -> str:
        sp = self.spaces[space]
        if sp.lin is not None:
            return sp.lin
        if space not in self._lin:
            cs = contiguous_strides(sp.dims)
            terms = [f"{i} * {s}" for i, s in zip(sp.idx, cs) if s and i != "0"]
            name = self.w.tmp("lin")
            self.w(f"{name} = {sp.zero}" + "".join(f" + {t}" for t in terms))
            self._lin[space] = name
        return self._lin[space]

    def unravel(self, space: Space, shape: tuple[int, ...]) -> list[str]:
        sp = self.spaces[space]
        if tuple(shape) == tuple(sp.dims):
            return list(sp.idx)
        key = (space, tuple(shape))
        if key not in self._idx:
            self._idx[key] = _unravel(self.w, self.lin(space), shape, lambda d: self.w.tmp("u"))
        return self._idx[key]

    def forget(self, space: Space) -> None:
        """Drop the index variables derived for ``space``: its indices are being redefined (a new chunk)."""
        self._lin.pop(space, None)
        self._idx = {key: v for key, v in self._idx.items() if key[0] != space}

    def address(self, view: View, idx: list[str], zero: str) -> tuple[str, str | None]:
        def expr(co: tuple[int, ...], const: int) -> str:
            return f"{zero} + {const}" + "".join(f" + {i} * {c}" if c != 1 else f" + {i}"
                                                 for i, c in zip(idx, co) if c and i != "0")

        (co, offset, _), *masks = view_exprs(view)
        addr = expr(co, offset)
        conds = []
        for c, k, b in masks:
            name = self.w.tmp("e")
            self.w(f"{name} = {expr(c, k)}")
            conds.append(f"({name} >= 0) & ({name} < {b})")
        if view.never_valid:
            conds.append(f"({zero} != {zero})")
        return addr, (" & ".join(conds) if conds else None)

    def load(self, ptr: str, view: View, idx: list[str], space: Space, dtype: DType) -> str:
        sp = self.spaces[space]
        if view.shape == tuple(sp.dims) and view.is_contiguous and idx == list(sp.idx):
            addr, valid = self.lin(space), None  # reads in the space's own order
        else:
            addr, valid = self.address(view, idx, sp.zero)
        m = sp.bound if valid is None else f"{sp.bound} & {valid}"
        x = f"tl.load({ptr} + ({addr}), mask={m}, other=0)"
        return f"({x} != 0)" if dtype is DType.bool else x

    # -- ops ---------------------------------------------------------------
    def emit(self, i: int, op: KOp, suffix: str = "") -> str:
        name = f"v{i}{suffix}"
        self.w(f"{name} = {self.expr(op, suffix)}")
        self.names[i] = name
        return name

    def arg(self, j: int, suffix: str) -> str:
        o = self.k.ops[j]
        return f"v{j}{suffix if o.space is Space.full else ''}"

    def expr(self, op: KOp, suffix: str) -> str:
        args = [self.arg(a, suffix) for a in op.args]
        if op.op in LEAF_OPS:
            return self.leaf(op)
        if op.op is Op.Gather:
            return self.gather(op, args[0])
        if op.op is Op.Contiguous:
            return args[0]
        adt = [self.k.ops[a].dtype for a in op.args]
        if op.op is Op.Cast:
            return self.cast(args[0], adt[0], op.dtype)
        if len(args) == 1:
            return self.unary(op, args[0], adt[0])
        return self.binary(op, args, adt)

    def leaf(self, op: KOp) -> str:
        dt = op.dtype
        sp = self.spaces[op.space]
        if op.op is Leaf.Load:
            view = op.attr("view")
            idx = self.unravel(op.space, view.shape)
            return self.load(f"in{op.attr('buf')}", view, idx, op.space, dt)
        if op.op is Leaf.Const:
            return f"tl.full({sp.block}, {num(op.attr('value'), dt)}, {TL[dt]})"
        view, shape, axis = op.attr("view"), op.attr("shape"), op.attr("axis")  # an Iota
        idx = self.unravel(op.space, view.shape)
        addr, valid = self.address(view, idx, sp.zero)
        inner = math.prod(shape[axis + 1:])
        val = f"(({addr}) // {inner} % {shape[axis]})"
        if valid is not None:
            val = f"tl.where({valid}, {val}, 0)"
        return f"{val}.to({TL[dt]})"

    def unary(self, op: KOp, a: str, adt: DType) -> str:
        """Exp2, Log2, Sin, Sqrt, Recip: computed in float32 for half precisions."""
        x = _as_f32(a, adt)
        if op.op is Op.Recip:
            e = f"tl.div_rn(tl.full({self.spaces[op.space].block}, 1.0, tl.float32), {x})"
        else:
            e = f"{_UNARY[op.op]}({x})"
        return _from_f32(e, op.dtype)

    def binary(self, op: KOp, args: list[str], adt: list[DType]) -> str:
        dt = op.dtype
        a, b = args[0], args[1]
        fa, fb = _as_f32(a, adt[0]), _as_f32(b, adt[1])
        if op.op is Op.Add:
            return f"({a} | {b})" if dt is DType.bool else _from_f32(f"{fa} + {fb}", dt)
        if op.op is Op.Mul:
            return f"({a} & {b})" if dt is DType.bool else _from_f32(f"{fa} * {fb}", dt)
        if op.op is Op.Div:
            return _from_f32(f"tl.div_rn({fa}, {fb})", dt)
        if op.op is Op.Mod:
            if dt.is_int:
                return f"tl.where({b} == 0, 0, {a} % tl.where({b} == 0, 1, {b})).to({TL[dt]})"
            return _from_f32(f"{fa} % {fb}", dt)
        if op.op is Op.LessThan:
            return f"({fa} < {fb})"
        if op.op is Op.Where:
            return f"tl.where({a}, {b}, {args[2]})"
        raise NotImplementedError(op.op)

    def cast(self, a: str, src: DType, dst: DType) -> str:
        if dst is DType.bool:
            return f"({a} != 0)"
        if src.is_float and dst.is_int:
            lo, hi = _INT_CLAMP[dst]
            x = self.w.tmp("c")
            self.w(f"{x} = {a}.to(tl.float32)" if src is not DType.float32 else f"{x} = {a}")
            self.w(f"{x} = tl.where(({x} == {x}) & (tl.abs({x}) < float(\"inf\")), {x}, 0.0)")
            self.w(f"{x} = tl.minimum(tl.maximum({x}, {lo}), {hi})")
            return f"{x}.to({TL[dst]})"
        return f"{a}.to({TL[dst]})"

    def gather(self, op: KOp, index: str) -> str:
        view, axis, nshape = op.attr("view"), op.attr("axis"), op.attr("shape")
        idx = list(self.unravel(op.space, nshape))
        it = "tl.int64" if self.big else "tl.int32"
        g = self.w.tmp("g")
        self.w(f"{g} = tl.minimum(tl.maximum({index}.to({it}), 0), {view.shape[axis] - 1})")
        idx[axis] = g
        return self.load(f"in{op.attr('buf')}", view, idx, op.space, op.dtype)

    def store(self, o: int, value: str, space: Space, dtype: DType) -> None:
        sp = self.spaces[space]
        v = f"{value}.to(tl.uint8)" if dtype is DType.bool else value
        self.w(f"tl.store(out{o} + {self.lin(space)}, {v}, mask={sp.bound})")


def _unravel(w: Writer, src: str, shape: Sequence[int], name: Callable[[int], str]) -> list[str]:
    """Writes the index of each dim of ``shape`` in a row-major unravel of ``src`` to variable ``name(d)``;
    returns the variables, "0" for dims of size 1. Lanes past the end are masked."""
    out = []
    for d, dg in enumerate(digits(tuple(shape))):
        if dg is None:
            out.append("0")
            continue
        div, mod = dg
        v = name(d)
        w(f"{v} = " + (src if div == 1 else f"{src} // {div}") + ("" if mod is None else f" % {mod}"))
        out.append(v)
    return out


def _is_big(k: Kernel) -> bool:
    n = max([math.prod(k.full)] + [b.numel for b in k.inputs] + [b.numel for _, b in k.outputs])
    return n >= 2**31 - 1


def _signature(k: Kernel, knobs: tuple[str, ...]) -> str:
    args = [f"in{i}" for i in range(len(k.inputs))] + [f"out{i}" for i in range(len(k.outputs))]
    args += [f"{name}: tl.constexpr" for name in knobs]
    return f"@triton.jit\ndef kernel({', '.join(args)}):\n"


def _finish(header: str, w: Writer) -> str:
    return "import triton\nimport triton.language as tl\n\n\n" + header + "\n".join(w.lines) + "\n"


def emit(kernel: Kernel, schedule: Schedule) -> str:
    """The source of ``kernel`` under a stored schedule (ValueError where it is not one of the kernel's)."""
    s = typed(kernel, schedule)
    if s is None:
        raise ValueError(f"not a schedule of this {kind_of(kernel)} kernel: {schedule}")
    return emit_typed(kernel, s)


def emit_typed(kernel: Kernel, schedule: TritonSchedule) -> str:
    if isinstance(schedule, ContractionSchedule):
        return emit_contraction(kernel, schedule)
    if isinstance(schedule, ReductionSchedule):
        return emit_reduction(kernel, schedule)
    return emit_elementwise(kernel)


# -- elementwise / gather ---------------------------------------------------------
def emit_elementwise(k: Kernel) -> str:
    w = Writer()
    big = _is_big(k)
    n = math.prod(k.full)
    w("pid = tl.program_id(0)" + (".to(tl.int64)" if big else ""))
    w("offs = pid * BLOCK + tl.arange(0, BLOCK)")
    w(f"fb = offs < {n}")
    w("zf = offs * 0")
    idx = _unravel(w, "offs", k.full, lambda d: f"f{d}")
    sp = Indexing(k.full, idx, "offs", "fb", "zf", "[BLOCK]")
    e = OpEmitter(k, w, {Space.full: sp, Space.row: sp}, big)
    for i, op in enumerate(k.ops):
        e.emit(i, op)
    for o, (i, b) in enumerate(k.outputs):
        e.store(o, e.names[i], Space.full, b.dtype)
    return _finish(_signature(k, CONSTEXPRS[Form.elementwise]), w)


# -- reduction ---------------------------------------------------------------------
def _levels(k: Kernel) -> list[int]:
    """Number of reduction passes that must finish before each op is known."""
    lv: list[int] = []
    for op in k.ops:
        base = max((lv[a] for a in op.args), default=0)
        lv.append(base + 1 if op.op in REDUCE_OPS else base)
    return lv


class _Reduction:
    """Writes a reduction kernel: ROWS rows per program, the reduced dims in chunks of BLOCK (one chunk when
    they fit: ``single``), one pass over them per level of reductions that depend on earlier ones."""

    def __init__(self, k: Kernel, schedule: ReductionSchedule):
        self.k = k
        self.w = w = Writer()
        big = _is_big(k)
        axes = k.reduce_axes
        row_dims = [d for d in range(len(k.full)) if d not in axes]
        self.red_dims = list(axes)
        nrows = math.prod(k.full[d] for d in row_dims)
        self.rlen = math.prod(k.full[d] for d in self.red_dims)
        w("pid = tl.program_id(0)" + (".to(tl.int64)" if big else ""))
        w("rid = pid * ROWS + tl.arange(0, ROWS)[:, None]")
        w(f"rb = rid < {nrows}")
        w("zr = rid * 0")
        w("jr = tl.arange(0, BLOCK)[None, :]" + (".to(tl.int64)" if big else ""))
        ridx = ["0"] * len(k.full)
        for d, v in zip(row_dims, _unravel(w, "rid", [k.full[d] for d in row_dims], lambda n: f"r{row_dims[n]}")):
            ridx[d] = v
        row = Indexing(k.row, ridx, "rid", "rb", "zr", "[ROWS, 1]")
        fidx = list(ridx)
        for d in self.red_dims:
            fidx[d] = f"f{d}" if k.full[d] > 1 else "0"
        # reduced dims last (size-1 dims aside): the full linear index is rid * rlen + j
        self.trailing = all(k.full[d] == 1 for d in range(min(axes), len(k.full)) if d not in axes)
        full = Indexing(k.full, fidx, "fl" if self.trailing else None, "fb", "zf", "[ROWS, BLOCK]")
        self.e = OpEmitter(k, w, {Space.full: full, Space.row: row}, big)
        self.single = self.rlen <= schedule.BLOCK
        self.done: set[int] = set()  # row-space ops emitted
        self.emitted_full: set[int] = set()  # full-space ops emitted (reused across passes when single)

    def chunk_indices(self) -> None:
        w, red_dims = self.w, self.red_dims
        w(f"fb = rb & (j < {self.rlen})")
        w("zf = zr + j * 0")
        if self.trailing:
            w(f"fl = rid * {self.rlen} + j")
        _unravel(w, "j", [self.k.full[d] for d in red_dims], lambda n: f"f{red_dims[n]}")
        self.e.forget(Space.full)

    def open_chunks(self) -> None:
        """A loop over the chunks of the reduced dims (nothing when there is one chunk)."""
        if not self.single:
            self.w(f"for j0 in range(0, {self.rlen}, BLOCK):")
            self.w.indent += 1
            self.w("j = j0 + jr")
            self.chunk_indices()

    def close_chunks(self) -> None:
        if not self.single:
            self.w.indent -= 1

    def emit_ready_rows(self) -> None:
        for i, op in enumerate(self.k.ops):
            if i in self.done or op.space is not Space.row or op.op in REDUCE_OPS:
                continue
            if all(a in self.done for a in op.args):
                self.e.emit(i, op)
                self.done.add(i)

    def emit_full(self, roots: list[int], suffix: str) -> None:
        """The full-space ops ``roots`` depend on, in this chunk."""
        for i in self.k.full_cone(roots):
            if self.single and i in self.emitted_full:
                continue
            self.e.emit(i, self.k.ops[i], suffix)
            self.emitted_full.add(i)

    def init_accumulators(self, reds: list[int]) -> None:
        for r in reds:
            acc_dt = _acc_dtype(self.k.ops[r].dtype)
            init = "0" if self.k.ops[r].op is Op.SumReduce else _lowest(acc_dt)
            self.w(f"acc{r} = tl.full([ROWS, BLOCK], {init}, {acc_dt})")
            if self.k.ops[r].op is Op.MaxReduce and acc_dt == "tl.float32":
                self.w(f"nan{r} = tl.full([ROWS, BLOCK], 0, tl.int32)")

    def fold(self, reds: list[int], suffix: str) -> None:
        """Each reduction's argument in this chunk folded into its accumulator (a float max tracks NaNs)."""
        w = self.w
        for r in reds:
            acc_dt = _acc_dtype(self.k.ops[r].dtype)
            x = f"{self.e.arg(self.k.ops[r].args[0], suffix)}.to({acc_dt})"
            if self.k.ops[r].op is Op.SumReduce:
                w(f"acc{r} += tl.where(fb, {x}, 0)")
            else:
                w(f"x{r} = tl.where(fb, {x}, {_lowest(acc_dt)})")
                if acc_dt == "tl.float32":
                    w(f"nan{r} = tl.maximum(nan{r}, (x{r} != x{r}).to(tl.int32))")
                w(f"acc{r} = tl.maximum(acc{r}, x{r})")

    def finish(self, reds: list[int]) -> None:
        """Each reduction's row value from its accumulator."""
        for r in reds:
            op = self.k.ops[r]
            if op.op is Op.SumReduce:
                val = f"tl.reduce(acc{r}, 1, tl.standard._sum_combine)[:, None]"
            else:
                val = f"tl.reduce(acc{r}, 1, tl.standard._elementwise_max)[:, None]"
                if _acc_dtype(op.dtype) == "tl.float32":
                    anynan = f"tl.reduce(nan{r}, 1, tl.standard._elementwise_max)[:, None] > 0"
                    val = f'tl.where({anynan}, float("nan"), {val})'
            val = f"({val} != 0)" if op.dtype is DType.bool else f"{val}.to({TL[op.dtype]})"
            self.w(f"v{r} = {val}")
            self.e.names[r] = f"v{r}"
            self.done.add(r)

    def reduction_pass(self, p: int, reds: list[int]) -> None:
        """The reductions whose arguments need ``p`` earlier passes: one loop over the reduced dims."""
        self.init_accumulators(reds)
        suffix = "" if self.single else f"_{p}"
        self.open_chunks()
        self.emit_full([self.k.ops[r].args[0] for r in reds], suffix)
        self.fold(reds, suffix)
        self.close_chunks()
        self.finish(reds)
        self.emit_ready_rows()

    def store_outputs(self) -> None:
        """The full-space outputs in one more pass over the reduced dims, then the row-space ones."""
        k, e = self.k, self.e
        full_outs = [(o, i, b) for o, (i, b) in enumerate(k.outputs) if k.ops[i].space is Space.full]
        if full_outs:
            suffix = "" if self.single else "_o"
            self.open_chunks()
            self.emit_full([i for _, i, _ in full_outs], suffix)
            for o, i, b in full_outs:
                e.store(o, e.arg(i, suffix), Space.full, b.dtype)
            self.close_chunks()
        for o, (i, b) in enumerate(k.outputs):
            if k.ops[i].space is Space.row:
                e.store(o, f"v{i}", Space.row, b.dtype)


def emit_reduction(k: Kernel, schedule: ReductionSchedule) -> str:
    r = _Reduction(k, schedule)
    if r.single:
        r.w("j = jr")
        r.chunk_indices()
    r.emit_ready_rows()
    lv = _levels(k)
    reds = [i for i, op in enumerate(k.ops) if op.op in REDUCE_OPS]
    for p in sorted({lv[k.ops[x].args[0]] for x in reds}):
        r.reduction_pass(p, [x for x in reds if lv[k.ops[x].args[0]] == p])
    r.store_outputs()
    return _finish(_signature(k, CONSTEXPRS[Form.reduction]), r.w)


def _acc_dtype(dt: DType) -> str:
    if dt.is_float:
        return "tl.float32"
    if dt is DType.int64:
        return "tl.int64"
    return "tl.int32"


def _lowest(acc_dt: str) -> str:
    return {"tl.float32": '-float("inf")', "tl.int64": "-9223372036854775808", "tl.int32": "-2147483648"}[acc_dt]


# -- contraction -------------------------------------------------------------------
def emit_contraction(k: Kernel, schedule: ContractionSchedule) -> str:
    plan = plan_of(k)
    w = Writer()
    big = _is_big(k)
    _tile_ids(w, plan.size("m"), plan.size("n"), ".to(tl.int64)" if big else "")
    # index expressions per operand orientation
    mi = _unravel_group(w, plan.m, k.full, "rm[:, None]", "m")
    ni = _unravel_group(w, plan.n, k.full, "rn[None, :]", "n")
    bi = _unravel_group(w, plan.batch, k.full, "pid_b", "b")
    _k_loop(k, w, big, {**mi, **ni, **bi})
    _contraction_epilogue(k, w, big, {**mi, **ni, **bi}, split_ok(k) and schedule.SPLIT_K > 1)
    return _finish(_signature(k, (*CONSTEXPRS[Form.contraction], "NATIVE_DOT")), w)


def _tile_ids(w: Writer, M: int, N: int, it: str) -> None:
    """The program's output tile (rows ``rm``, columns ``rn``, batch ``pid_b``): tiles in groups of GROUP_M
    rows, so that neighbouring programs share operand tiles in L2."""
    w("pid = tl.program_id(0)" + it)
    w("pid_k = tl.program_id(2)")
    w(f"num_m = ({M} + BLOCK_M - 1) // BLOCK_M")
    w(f"num_n = ({N} + BLOCK_N - 1) // BLOCK_N")
    w("tiles = num_m * num_n")
    w("pid_b = pid // tiles")
    w("pid = pid % tiles")
    w("group = GROUP_M * num_n")
    w("first_m = pid // group * GROUP_M")
    w("gsz = tl.minimum(num_m - first_m, GROUP_M)")
    w("pm = first_m + (pid % group) % gsz")
    w("pn = (pid % group) // gsz")
    w("rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)" + it)
    w("rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)" + it)
    w("rk0 = tl.arange(0, BLOCK_K)" + it)


def _k_loop(k: Kernel, w: Writer, big: bool, outer: dict[int, str]) -> None:
    """The loop over K (this program's share of it under split-K): both operand tiles loaded, then one dot
    into ``acc``. ``outer``: the index of each M, N and batch dim."""
    plan = plan_of(k)
    M, N, K = plan.size("m"), plan.size("n"), plan.size("k")
    w("acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    w(f"for k0 in range(pid_k * BLOCK_K, {K}, BLOCK_K * SPLIT_K):")
    w.indent += 1
    w("rk = k0 + rk0")
    ka = _unravel_group(w, plan.k, k.full, "rk[None, :]", "ka")
    kb = _unravel_group(w, plan.k, k.full, "rk[:, None]", "kb")
    dummy = Indexing(k.full, [], None, "", "", "")
    e = OpEmitter(k, w, {Space.full: dummy}, big)
    _load_operand(k, w, e, "a", k.ops[plan.a], outer, ka, "rk[None, :]",
                  f"(rm[:, None] < {M}) & (rk[None, :] < {K})", "(rm[:, None] * 0 + rk[None, :] * 0)")
    _load_operand(k, w, e, "b", k.ops[plan.b], outer, kb, "rk[:, None]",
                  f"(rk[:, None] < {K}) & (rn[None, :] < {N})", "(rk[:, None] * 0 + rn[None, :] * 0)")
    dt = k.ops[plan.mul].dtype
    if dt is DType.float32:
        w('acc = tl.dot(a, b, acc, input_precision=PRECISION)')
    elif dt is DType.bfloat16:
        # the interpreter's bf16 dot is wrong; bfloat16 values are exact in tf32, so it takes the same products
        w("if NATIVE_DOT:")
        w("    acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)")
        w("else:")
        w('    acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="tf32")')
    else:
        w(f"acc = tl.dot(a.to({TL[dt]}), b.to({TL[dt]}), acc)")
    w.indent -= 1


def _load_operand(k: Kernel, w: Writer, e: OpEmitter, name: str, op: KOp, outer: dict[int, str],
                  kidx: dict[int, str], ksrc: str, bound: str, zero: str) -> None:
    """``name = tl.load(...)``: one operand's tile; a group of dims the view walks as one strided run is
    addressed by its flat index, without a div/mod per element."""
    plan = plan_of(k)
    view = op.attr("view")
    idx = [outer.get(d) or kidx.get(d) or "0" for d in range(len(k.full))]
    flat = []
    for dims, src in ((plan.m, "rm[:, None]"), (plan.n, "rn[None, :]"), (plan.batch, "pid_b"), (plan.k, ksrc)):
        stride = view_run(view, dims, k.full)
        if stride is not None:
            for d in dims:
                idx[d] = "0"
            if stride:
                flat.append(f" + {src} * {stride}")
    addr, valid = e.address(view, idx, zero)
    addr += "".join(flat)
    m = bound if valid is None else f"{bound} & {valid}"
    w(f"{name} = tl.load(in{op.attr('buf')} + ({addr}), mask={m}, other=0)")


def _contraction_epilogue(k: Kernel, w: Writer, big: bool, outer: dict[int, str], atomic: bool) -> None:
    """The row-space ops over the finished tile, and its outputs stored (added atomically under split-K)."""
    plan = plan_of(k)
    M, N = plan.size("m"), plan.size("n")
    ridx = [outer.get(d) or "0" for d in range(len(k.full))]
    for d in plan.k:
        ridx[d] = "0"
    w("zr = rm[:, None] * 0 + rn[None, :] * 0")
    w(f"rb = (rm[:, None] < {M}) & (rn[None, :] < {N})")
    row = Indexing(k.row, ridx, None, "rb", "zr", "[BLOCK_M, BLOCK_N]")
    e = OpEmitter(k, w, {Space.row: row, Space.full: row}, big)
    red = plan.red
    rdt = k.ops[red].dtype
    w(f"v{red} = acc.to({TL[rdt]})")
    e.names[red] = f"v{red}"
    for i, op in enumerate(k.ops):
        if op.space is Space.row and i != red:
            e.emit(i, op)
    if atomic:
        (i, _b), = k.outputs
        w(f"tl.atomic_add(out0 + {e.lin(Space.row)}, v{i}, mask=rb)")
    else:
        for o, (i, b) in enumerate(k.outputs):
            e.store(o, f"v{i}", Space.row, b.dtype)


def _unravel_group(w: Writer, dims: tuple[int, ...], full: tuple[int, ...], src: str, prefix: str) -> dict[int, str]:
    """Index per dim of a flattened group of dims (row-major over ``dims``)."""
    idx = _unravel(w, src, [full[d] for d in dims], lambda n: f"{prefix}{dims[n]}")
    return {d: v for d, v in zip(dims, idx) if v != "0"}
