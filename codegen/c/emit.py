"""C source for elementwise, gather and reduction kernels (and the generic contraction fallback).

Every kernel is ``int lum_kernel(void **b, int nt)``: ``b`` holds the input
buffers then the output buffers, ``nt`` the OpenMP thread count. Loop indices
are ``i<k>`` over the (normalised) full space; the innermost loop is an
``omp simd`` loop over a contiguous range, outer dims are unravelled once per
row. Values are SSA variables ``v<n>``, one per kernel op.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...ir.dtypes import DType
from ...ir.graph import Op
from ...ir.view import View, box, contiguous_strides
from ..index import digits, view_exprs, view_masks
from ..kernel import REDUCE_OPS, Kernel, KOp, Leaf, Space
from . import ctypes_map as ct
from .normalize import normalize
from .prelude import PRELUDE, block_transpose, vector_types

if TYPE_CHECKING:
    from .knobs import ElementwiseSchedule, LoopSchedule, ReductionSchedule

PAR_MIN = 1 << 16  # elements below which a kernel runs on one thread
# selects in a kernel from which gcc compiles its epilogue loops (a contraction's, a stencil's) without jump
# threading (``LUM_NO_THREADING``): threading copies blocks across a long chain of them until the vectoriser sees
# control flow in the loop and leaves it scalar. A QuantizeLinear epilogue has 5 (its rounding's sign and range,
# two clamps): 2 threads, QDQ MobileNetV3-Small's depthwise 5x5s at 14x14 648 -> 142 us, its stem 4.4 -> 0.75 ms
# (with 9-29, before Tensor.round's sign trick); with 5, over threading: QDQ 1x1 64->256 at 56x56 1.05x, 3x3 s2
# 3->16 at 640x640 1.10x, depthwise 5x5 240 at 28x28 1.08x, QDQ MobileNetV3 1.02x, QDQ ResNet-50 1.00x / 1.02x.
# A hardswish's 1-2 keep threading, which the stencils' own loops gain from (depthwise convs 1.1-1.7x slower
# without it), and so do loops that gather (GridSample: 1.2x slower without it); no float kernel of the bundled
# models has more than 3
THREADING_MAX_SELECTS = 5


def affine(coeffs, const: int, exprs: list[str]) -> str:
    terms = [f"{c}*{e}" if c != 1 else e for c, e in zip(coeffs, exprs) if c and e != "0"]
    if const or not terms:
        terms.append(str(const))
    return "(" + " + ".join(terms) + ")"


def unravel(lin: str, shape: tuple[int, ...]) -> list[str]:
    out = []
    for dg in digits(shape):
        if dg is None:
            out.append("0")
            continue
        div, mod = dg
        e = lin if div == 1 else f"({lin} / {div})"
        out.append(e if mod is None else f"({e} % {mod})")
    return out


class Body:
    """Emits the C statements computing kernel values in one scope."""

    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.red = set(kernel.reduce_axes)
        self.staged: set[int] = set()  # loads copied into an array s<n> before a lane loop (emit_reduction_lanes)
        self.zero: set[int] = set()  # loads known to read zeros in this scope (a concat's other inputs on a row)

    # -- index expressions ---------------------------------------------------
    def space_idx(self, space: Space) -> list[str]:
        return ["0" if (space is Space.row and d in self.red) else f"i{d}" for d in range(len(self.k.full))]

    def linear(self, space: Space) -> str:
        shape = self.k.space_shape(space)
        return affine(contiguous_strides(shape), 0, self.space_idx(space))

    def idx_for(self, shape: tuple[int, ...], space: Space) -> list[str]:
        if shape == self.k.space_shape(space):
            return self.space_idx(space)
        return unravel(self.linear(space), shape)

    @staticmethod
    def read(view: View, ex: list[str]) -> tuple[str, str | None]:
        """(element offset, validity or None) of ``view`` at index expressions ``ex``."""
        (co, k, _), *masks = view_exprs(view)
        conds = [f"((uint64_t){affine(c, k, ex)} < {b}ULL)" for c, k, b in masks]
        return affine(co, k, ex), " && ".join(conds) or None

    # -- values --------------------------------------------------------------
    def value(self, n: int) -> list[str]:
        """Statements defining v<n> (its args already defined)."""
        op = self.k.ops[n]
        t = ct.COMPUTE[op.dtype]
        if n in self.zero:
            return [f"const {t} v{n} = 0;"]
        if n in self.staged:
            return [f"{t} v{n} = s{n}[j];"]
        if op.op is Leaf.Load:
            return [f"{t} v{n} = {self._load(op)};"]
        if op.op is Leaf.Const:
            return [f"const {t} v{n} = {ct.literal(op.attr('value'), op.dtype)};"]
        if op.op is Op.Iota:
            return [f"{t} v{n} = {self._iota(op)};"]
        if op.op is Op.Gather:
            return self._gather(n, op)
        return [f"{t} v{n} = {self._expr(op)};"]

    def _load(self, op: KOp) -> str:
        view: View = op.attr("view")
        if view.never_valid:
            return "0"
        at, ok = self.read(view, self.idx_for(view.shape, op.space))
        x = ct.load(op.dtype, f"in{op.attr('buf')}[{at}]")
        if ok and _inside(view, self.k.inputs[op.attr("buf")].numel):
            # read whatever the mask, then selected: a load under the mask is a branch unless the vectoriser
            # has a masked load of its type (AVX2 has none for bytes: the -inf padding of a max pool's input,
            # 128x24x24, 64 -> 32 us)
            return f"({{ const {ct.COMPUTE[op.dtype]} lum_x = {x}; ({ok}) ? lum_x : 0; }})"
        return f"(({ok}) ? {x} : 0)" if ok else x

    def _iota(self, op: KOp) -> str:
        view: View = op.attr("view")
        if view.never_valid:
            return "0"
        base, axis = op.attr("shape"), op.attr("axis")
        flat, ok = self.read(view, self.idx_for(view.shape, op.space))
        inner = math.prod(base[axis + 1:])
        x = ct.cast(DType.int64, op.dtype, f"(({flat} / {inner}) % {base[axis]})")
        return f"(({ok}) ? {x} : 0)" if ok else x

    def _gather(self, n: int, op: KOp) -> list[str]:
        view: View = op.attr("view")
        axis = op.attr("axis")
        t = ct.COMPUTE[op.dtype]
        if view.never_valid:
            return [f"{t} v{n} = 0;"]
        ex = self.idx_for(op.attr("shape"), op.space)
        d = view.shape[axis]
        g = f"g{n}"
        ex[axis] = g
        at, ok = self.read(view, ex)
        x = ct.load(op.dtype, f"in{op.attr('buf')}[{at}]")
        if ok:
            x = f"(({ok}) ? {x} : 0)"
        a = op.args[0]
        return [f"int64_t {g} = (int64_t)v{a}; {g} = {g} < 0 ? 0 : ({g} > {d - 1} ? {d - 1} : {g});",
                f"{t} v{n} = {x};"]

    def _expr(self, op: KOp) -> str:
        a = [f"v{i}" for i in op.args]
        adt = [self.k.ops[i].dtype for i in op.args]
        dt = op.dtype
        name = op.op
        if name == "Cast":
            return ct.cast(adt[0], dt, a[0])
        if name == "Contiguous":
            return a[0]
        if name == "Where":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if name == "LessThan":
            return f"(uint8_t)({a[0]} < {a[1]})"
        if dt is DType.bool:
            r = {"Add": f"({a[0]} | {a[1]})", "Mul": f"({a[0]} & {a[1]})"}.get(name)
            if r is None:
                r = f"(uint8_t)({self._num(name, a, 'int64_t', DType.int64)} != 0)"
            return r
        return self._num(name, a, ct.COMPUTE[dt], dt)

    @staticmethod
    def _num(name: str, a: list[str], t: str, dt: DType) -> str:
        if dt.is_float:
            r = {
                "Exp2": f"lum_exp2({a[0]})" if len(a) == 1 else "",
                "Log2": f"lum_log2({a[0]})",
                "Sin": f"sinf({a[0]})",
                "Sqrt": f"sqrtf({a[0]})",
                "Recip": f"(1.0f / {a[0]})",
                "Add": f"({a[0]} + {a[1]})" if len(a) > 1 else "",
                "Mul": f"({a[0]} * {a[1]})" if len(a) > 1 else "",
                "Div": f"({a[0]} / {a[1]})" if len(a) > 1 else "",
                "Mod": f"fmodf({a[0]}, {a[1]})" if len(a) > 1 else "",
            }[name]
            return ct.round_to(dt, r)
        u = "uint64_t" if dt is DType.int64 else "uint32_t"
        if name == "Add":
            return f"({t})(({u}){a[0]} + ({u}){a[1]})"
        if name == "Mul":
            return f"({t})(({u}){a[0]} * ({u}){a[1]})"
        if name == "Mod":
            return f"(({a[1]} == 0 || {a[1]} == -1) ? ({t})0 : ({t})({a[0]} % {a[1]}))"
        if name == "Recip":
            return f"({a[0]} == 0 ? ({t})0 : ({t})(1 / {a[0]}))"
        fn = {"Exp2": "lum_exp2", "Log2": "lum_log2", "Sin": "sinf", "Sqrt": "sqrtf"}[name]
        return ct.cast(DType.float32, dt, f"{fn}((float){a[0]})")


def epilogue_attribute(k: Kernel) -> str:
    """The attribute the function holding ``k``'s epilogue takes: ``LUM_NO_THREADING`` where ``k`` has
    THREADING_MAX_SELECTS selects or more."""
    return "LUM_NO_THREADING " if sum(o.op is Op.Where for o in k.ops) >= THREADING_MAX_SELECTS else ""


def _signature(k: Kernel) -> list[str]:
    return ["int lum_kernel(void **b, int nt) {", "    (void)nt;", *_buffers(k)]


def _buffers(k: Kernel) -> list[str]:
    """The kernel's inputs and outputs as typed pointers ``in<i>``, ``out<j>`` into the argument array ``b``;
    ``restrict`` but for the inputs the output may be written over and that output (``Kernel.in_place_inputs``)."""
    shared = set(k.in_place_inputs)
    lines = []
    for i, buf in enumerate(k.inputs):
        r = "" if i in shared else "restrict "
        lines.append(f"    const {ct.STORAGE[buf.dtype]} *{r}in{i} = (const {ct.STORAGE[buf.dtype]} *)b[{i}];")
    for j, (_, buf) in enumerate(k.outputs):
        t, r = ct.STORAGE[buf.dtype], "" if shared else "restrict "
        lines.append(f"    {t} *{r}out{j} = ({t} *)b[{len(k.inputs) + j}];")
    return lines


def _simd(sched: LoopSchedule, extra: str = "") -> str:
    """The pragma line(s) before an innermost loop: ``omp simd`` (with the reductions), or, when the schedule
    unrolls a loop without reductions, GCC's ivdep + unroll (``omp simd`` admits no pragma after it)."""
    unroll = sched.unroll
    if unroll > 1 and "reduction" not in extra:
        return f"#pragma GCC ivdep\n#pragma GCC unroll {unroll}"
    vec = sched.vec
    return "#pragma omp simd" + (f" simdlen({vec})" if vec else "") + extra


def _par(numel: int, sched: LoopSchedule, chunk: int = 0) -> str | None:
    if numel < PAR_MIN or sched.threads == 1:
        return None
    return "#pragma omp parallel for num_threads(nt) schedule(static" + (f", {chunk})" if chunk else ")")


def _indent(lines: list[str], n: int) -> list[str]:
    pad = " " * n
    return [pad + x for x in "\n".join(lines).split("\n")]


def _function(k: Kernel, body: list[str], loop: tuple[str, int] | None = None, par: str | None = None,
              head: Sequence[str] = (), helpers: Sequence[str] = ()) -> str:
    """The kernel function: ``body`` once, or in a loop of ``loop = (variable, count)`` iterations, an OpenMP
    parallel one by the pragma ``par`` when there is more than one; ``head`` before it, ``helpers`` (types and
    functions) before the function."""
    lines = _signature(k) + (_indent(list(head), 4) if head else [])
    if loop is None:
        lines += _indent(body, 4) if body else []
    else:
        var, count = loop
        if par and count > 1:
            lines.append("    " + par)
        lines += [f"    for (int64_t {var} = 0; {var} < {count}LL; {var}++) {{", *_indent(body, 8), "    }"]
    return PRELUDE + "\n".join([*helpers, *lines, "    return 0;", "}"]) + "\n"


def emit_elementwise(kernel: Kernel, sched: ElementwiseSchedule, vw: int) -> str:
    """The loop over ``kernel``'s elements; ``vw`` float32 lanes (the transposed tiles' rows)."""
    k = normalize(kernel)
    n = len(k.full)
    numel = math.prod(k.full)
    if numel == 0:
        return _function(k, [])
    if n == 0:
        return _function(k, _inner(k, {}, set()))
    transposed = _transposed(k, vw)
    if transposed is not None:
        return _tiled(k, sched, *transposed, vw)
    if n >= 2 and k.full[-1] <= SMALL_INNER:
        return _unrolled_inner(k, sched, _par(numel, sched))
    inner = k.full[-1]
    ch = max(1, min(inner, sched.block))
    tile, count = _blocks(k.full[:-1], inner, ch)
    # masked loads (a pad, the halves of a concat) are staged, as in the lanes reductions: the loop then reads
    # them without a test per element, and vectorises
    staged = _stageable(k, ch)
    bounds, head = _block_loop(n - 1, bool(staged))
    tile += bounds
    loop = _simd(sched).split("\n") + head
    rows = _by_rows(k, staged, n - 1)
    tile += _one_row_load(k, staged, rows, ch, loop) if len(rows) >= ROWS_MIN else \
        _staged_loop(k, staged, set(), ch, loop)
    return _function(k, tile, ("t", count), _par(numel, sched))


TILE_COLUMNS = 64  # a transposed load's tile: VW rows of the dim it reads contiguously by this many columns


def _transposed(k: Kernel, vw: int) -> tuple[int, dict[int, KOp]] | None:
    """(d, loads): the float32 full-space loads that walk the innermost dim with a stride and dim ``d`` of at least
    ``vw`` elements contiguously (a channels-last value read in the logical order, or the other way; a
    concatenation's part), masked, if at all, independently of ``d``; ``d`` the dim most of them read so."""
    n = len(k.full)
    if n < 2 or k.full[-1] < vw:
        return None
    by: dict[int, dict[int, KOp]] = {}
    for i, op in enumerate(k.ops):
        if op.op is not Leaf.Load or op.space is not Space.full or k.inputs[op.attr("buf")].dtype is not DType.float32:
            continue
        v: View = op.attr("view")
        if v.shape != k.full or v.never_valid or v.strides[-1] in (0, 1):
            continue
        d = next((d for d in range(n - 1) if v.strides[d] == 1 and k.full[d] >= vw
                  and all(c[d] == 0 for c, _, _ in view_masks(v))), None)
        if d is not None:
            by.setdefault(d, {})[i] = op
    if not by:
        return None
    d = max(by, key=lambda e: len(by[e]))
    return d, by[d]


def _tiled(k: Kernel, sched: ElementwiseSchedule, d: int, loads: dict[int, KOp], vw: int) -> str:
    """The loop by tiles of ``vw`` elements of dim ``d`` by TILE_COLUMNS of the innermost dim: each of the
    ``loads`` (reading ``d`` contiguously, the innermost with a stride) copied into an array by block transposes
    (lum_tr), rows along the innermost dim, then the tile's rows computed as in emit_elementwise. Read in place, a
    load at a stride reads a cache line per element: a 16-channel 320x320 channels-last value copied into the
    logical order, 2 threads, hot, 621 -> 145 us (back 486 -> 96); 256 channels at 40x40 308 -> 32 us. The tiles
    of one column block run one after the other, so that they read the strided rows whole."""
    n, tc = len(k.full), TILE_COLUMNS
    rows, cols = -(-k.full[d] // vw), -(-k.full[-1] // tc)
    outer = tuple(s for e, s in enumerate(k.full[:-1]) if e != d)
    tile = [f"const int64_t r = t / {rows * cols}, c0 = (t / {rows}) % {cols} * {tc}, d0 = t % {rows} * {vw};",
            f"const int64_t nd = lum_min64({vw}, {k.full[d]} - d0), nl = lum_min64({tc}, {k.full[-1]} - c0);",
            "(void)r;"]
    tile += [f"const int64_t i{e} = {x};" for e, x in zip([e for e in range(n - 1) if e != d], unravel("r", outer))]
    at = [f"i{e}" for e in range(n - 1)] + ["c0"]
    at[d] = "d0"
    for i, op in loads.items():
        tile += _transposed_load(i, op, at, vw)
    row = [f"const int64_t i{d} = d0 + q;", *(f"const float *restrict s{i} = a{i} + q * {tc};" for i in loads),
           *_simd(sched).split("\n"), "for (int64_t j = 0; j < nl; j++) {", f"    const int64_t i{n - 1} = c0 + j;",
           *_indent(_inner(k, loads, set()), 4), "}"]
    tile += ["for (int64_t q = 0; q < nd; q++) {", *_indent(row, 4), "}"]
    return _function(k, tile, ("t", math.prod(outer) * rows * cols), _par(math.prod(k.full), sched),
                     helpers=vector_types("float", vw) + block_transpose(vw))


def _transposed_load(n: int, op: KOp, at: list[str], vw: int) -> list[str]:
    """Statements filling ``a<n>`` (``nd`` rows of TILE_COLUMNS) with load ``n`` at the tile ``at`` indexes: the
    columns its mask allows by block transposes, zeros around them."""
    view: View = op.attr("view")
    tc, step = TILE_COLUMNS, view.strides[-1]
    src = f"in{op.attr('buf')} + {Body.read(view, at)[0]}"
    if not view.mask:
        return [f"float a{n}[{vw * tc}];", f"lum_tr({src}, {step}, nl, nd, a{n}, {tc});"]
    L = [f"float a{n}[{vw * tc}];", "{", *_indent(mask_range(view, at, len(at) - 1), 4)]
    return [*L, "    lo = lum_min64(lo, nl); hi = lum_max64(hi, lo);",
            "    for (int64_t q = 0; q < nd; q++) {",
            f"        for (int64_t w = 0; w < lo; w++) a{n}[q * {tc} + w] = 0;",
            f"        for (int64_t w = hi; w < nl; w++) a{n}[q * {tc} + w] = 0;",
            "    }",
            f"    if (hi > lo) lum_tr({src} + lo * {step}, {step}, hi - lo, nd, a{n} + lo, {tc});", "}"]


def _blocks(outer: tuple[int, ...], length: int, ch: int) -> tuple[list[str], int]:
    """The head of one iteration ``t`` over the rows of ``outer`` times blocks of ``ch`` of a dim of ``length``:
    the row's indices i0.. and the block's [j0, j1); and the iterations' count."""
    nch = -(-length // ch)
    tile = [f"int64_t r = t / {nch}, j0 = (t % {nch}) * {ch}, j1 = lum_min64(j0 + {ch}, {length});", "(void)r;"]
    tile += [f"const int64_t i{d} = {e};" for d, e in enumerate(unravel("r", outer))]
    return tile, math.prod(outer) * nch


SMALL_INNER = 4  # an innermost dim of at most this many elements is unrolled under a loop over the dim outside it
# and so are the short dims outside it while all those unrolled hold at most UNROLLED_MAX elements: a permutation of
# small dims (a dilated Winograd conv's phases interleaved back, [.., 5, 3, 2] from [.., 2, 3, 5]) otherwise looped
# over rows of 2 with the indices divided out per row (256 x 28 x 28, 2 threads: 542 -> 64 us)
UNROLLED_MAX = 32
# there a staged row serves every element of the short dim: it pays from shorter rows (a bilinear 2x of 256 x 20x20
# 1.6x faster staged from 8 than from STAGE_MIN)
UNROLLED_STAGE_MIN = 8


def _unrolled_from(full: tuple[int, ...]) -> int:
    """The first of the innermost dims ``_unrolled_inner`` unrolls: the innermost, and each short one outside it while
    they hold at most UNROLLED_MAX elements, but never dim 0 (the loop runs over the dim outside them)."""
    d = len(full) - 1
    while d > 1 and full[d - 1] <= SMALL_INNER and math.prod(full[d - 1:]) <= UNROLLED_MAX:
        d -= 1
    return d


def _unrolled_inner(k: Kernel, sched: ElementwiseSchedule, par: str | None) -> str:
    """A loop over the dim outside the short innermost ones (``_unrolled_from``), each of their elements in a copy of
    the body: the loop vectorises with the outputs' elements interleaved (an output [.., 80, 2] of phases: its loop
    of 2 with the indices divided out per pair, 2.0 ms for a 3.3 MB interleave)."""
    n, u = len(k.full), _unrolled_from(k.full)
    inner, mid = math.prod(k.full[u:]), k.full[u - 1]
    ch = max(1, min(mid, sched.block // inner))
    tile, count = _blocks(k.full[:u - 1], mid, ch)
    # masked loads the same for every element of the short dims (a zero-padded tap of a resize, broadcast over its
    # phases) are staged once per block, as in emit_elementwise
    staged = {i: op for i, op in _stageable(k, ch, UNROLLED_STAGE_MIN).items()
              if all(op.attr("view").strides[e] == 0 and all(c[e] == 0 for c, _, _ in view_masks(op.attr("view")))
                     for e in range(u, n))}
    body = [line for p in itertools.product(*(range(s) for s in k.full[u:]))
            for line in ["{", *(f"    const int64_t i{e} = {q};" for e, q in zip(range(u, n), p)),
                         *_indent(_inner(k, staged, set()), 4), "}"]]
    bounds, head = _block_loop(u - 1, bool(staged))
    tile += bounds + [line for i, op in staged.items() for line in _stage_load(i, op, u - 1, ch)]
    loop = [*_simd(sched).split("\n"), *head, *_indent(body, 4), "}"]
    return _function(k, tile + loop, ("t", count), par)


def _block_loop(d: int, staged: bool) -> tuple[list[str], list[str]]:
    """The statements before a block's loop over dim ``d`` (from ``_blocks``) and the loop's head: with ``staged``
    loads it counts j from the block's start c0, as their arrays are indexed."""
    if not staged:
        return [], [f"for (int64_t i{d} = j0; i{d} < j1; i{d}++) {{"]
    return ["const int64_t c0 = j0, nl = j1 - j0;"], ["for (int64_t j = 0; j < nl; j++) {",
                                                        f"    const int64_t i{d} = c0 + j;"]


ROWS_MIN = 2  # row-masked loads (a concat of two parts or more) from which a row reads only the one living on it


def _inner(k: Kernel, staged: dict[int, KOp], zero: set[int]) -> list[str]:
    """The statements of one element: its values (``staged`` loads from their arrays, ``zero`` ones as zeros, the
    others in place), then the outputs' stores."""
    body = Body(k)
    body.staged, body.zero = set(staged), zero
    stmts = [line for i in k.full_cone([o for o, _ in k.outputs]) for line in body.value(i)]
    lin = body.linear(Space.full)
    return stmts + [f"out{j}[{lin}] = {ct.store(buf.dtype, f'v{o}')};" for j, (o, buf) in enumerate(k.outputs)]


def _staged_loop(k: Kernel, staged: dict[int, KOp], zero: set[int], ch: int, loop: list[str]) -> list[str]:
    """The ``staged`` loads copied into their arrays, then ``loop`` (its head) over the block's elements."""
    stage = [line for i, op in staged.items() for line in _stage_load(i, op, len(k.full) - 1, ch)]
    return [*stage, *loop, *_indent(_inner(k, staged, zero), 4), "}"]


def _by_rows(k: Kernel, staged: dict[int, KOp], din: int) -> dict[int, KOp]:
    """The staged loads whose masks do not involve the innermost dim: each reads a whole row or none of it."""
    return {i: op for i, op in staged.items() if all(c[din] == 0 for c, _, _ in view_masks(op.attr("view")))}


def _one_row_load(k: Kernel, staged: dict[int, KOp], rows: dict[int, KOp], ch: int, loop: list[str]) -> list[str]:
    """A concat's loop: its inputs are masked by rows alone, each living on rows of its own, and summed. Staged, a
    row of n inputs filled n arrays (all but one with zeros) and summed them per element: DenseNet-121's
    concatenations took 3.3 ms against onnxruntime's copies' 1.3. Where only one of them lives on the row, the
    row reads it in place and takes the others as zeros (the other staged loads staged as before); any other row
    runs the general loop."""
    ex = [f"i{d}" for d in range(len(k.full) - 1)] + ["c0"]
    L = ["int lum_one = -1, lum_live = 0;"]
    for i, op in rows.items():
        conds = [f"(uint64_t){affine(c, k0, ex)} < {b}ULL" for c, k0, b in view_masks(op.attr("view"))]
        L.append(f"if ({' && '.join(conds)}) {{ lum_one = {i}; lum_live++; }}")
    L += ["if (lum_live != 1) lum_one = -1;", "switch (lum_one) {"]
    rest = {i: op for i, op in staged.items() if i not in rows}
    for i in rows:
        L += [f"case {i}: {{", *_indent(_staged_loop(k, rest, set(rows) - {i}, ch, loop), 4), "    break;", "}"]
    return [*L, "default: {", *_indent(_staged_loop(k, staged, set(), ch, loop), 4), "}", "}"]


def _stash(k: Kernel, body: Body, full_outs) -> tuple[int, int, int] | None:
    """(output, op, reduction): the last reduction's argument is also needed by the full-space outputs;
    its pass stores it in a float32 output, and the output pass reads it back instead of recomputing it."""
    reds = [n for n, op in enumerate(k.ops) if op.op in REDUCE_OPS]
    if not reds or not full_outs:
        return None
    a = k.ops[reds[-1]].args[0]
    if k.ops[a].space is not Space.full or ct.COMPUTE[k.ops[a].dtype] != "float":
        return None
    if a not in k.full_cone([o for _, o, _ in full_outs]):
        return None
    for j, _, b in full_outs:
        if b.dtype is DType.float32:
            return j, a, reds[-1]
    return None


_MAX_INIT = {"float": "-INFINITY", "int64_t": "INT64_MIN", "int32_t": "INT32_MIN", "uint8_t": "0"}


def _red_loop(k: Kernel, stmts: list[str], pragma: list[str]) -> list[str]:
    """``stmts`` in a loop over the reduced dims (``pragma`` lines before it), or in a block when none is."""
    red = [d for d in range(len(k.full)) if d in k.reduce_axes]
    if not red:
        return ["{", *_indent(stmts, 4), "}"]
    nred = math.prod(k.full[d] for d in red)
    if len(red) == 1:
        head = [f"for (int64_t i{red[0]} = 0; i{red[0]} < {nred}; i{red[0]}++) {{"]
    else:
        head = [f"for (int64_t q = 0; q < {nred}LL; q++) {{"]
        head += [f"    const int64_t i{d} = {e};" for d, e in zip(red, unravel("q", tuple(k.full[d] for d in red)))]
    return pragma + head + _indent(stmts, 4) + ["}"]


def _passes(k: Kernel, body: Body, sched: ReductionSchedule):
    """(full-space outputs as (output, op, buffer), the full space's linear index, the stash or None)."""
    full_outs = [(j, o, b) for j, (o, b) in enumerate(k.outputs) if k.ops[o].space is Space.full]
    return full_outs, body.linear(Space.full), _stash(k, body, full_outs) if sched.stash else None


def _update(op: KOp, a: int, acc: str, nan: str) -> list[str]:
    """Statements folding v<a> into the accumulator ``acc`` of reduction ``op`` (and a float max's NaN flag)."""
    if op.op is Op.SumReduce:
        return [f"{acc} = {acc} | v{a};" if op.dtype is DType.bool else f"{acc} += v{a};"]
    upd = [f"{acc} = v{a} > {acc} ? v{a} : {acc};"]
    if ct.COMPUTE[op.dtype] == "float":
        upd.append(f"{nan} |= (v{a} != v{a});")
    return upd


def _arg_stmts(body: Body, n: int, stash, lin: str) -> list[str]:
    """Statements computing the argument of reduction ``n`` (stored when it is the stashed one)."""
    a = body.k.ops[n].args[0]
    stmts = [x for i in body.k.full_cone([a]) for x in body.value(i)]
    if stash and stash[2] == n:
        stmts.append(f"out{stash[0]}[{lin}] = v{a};")
    return stmts


def _out_stmts(body: Body, full_outs, stash, lin: str, prefix) -> list[str]:
    """Statements computing and storing the full-space outputs (the stashed value read back);
    ``prefix(needed ops)`` gives statements to put first."""
    stop = frozenset([stash[1]] if stash else [])
    need = body.k.full_cone([o for _, o, _ in full_outs], stop)
    stmts = prefix([i for i in need if i not in stop])
    for i in need:
        stmts += [f"float v{i} = out{stash[0]}[{lin}];"] if i in stop else body.value(i)
    return stmts + [f"out{j}[{lin}] = {ct.store(b.dtype, f'v{o}')};" for j, o, b in full_outs]


def emit_reduction(kernel: Kernel, sched: ReductionSchedule) -> str:
    k = normalize(kernel)
    body = Body(k)
    kept = [d for d in range(len(k.full)) if d not in body.red]
    rows = math.prod(k.full[d] for d in kept)
    row_stmts: list[str] = []
    for d, e in zip(kept, unravel("r", tuple(k.full[d] for d in kept))):
        row_stmts.append(f"const int64_t i{d} = {e};")

    def red_loop(stmts: list[str], simd_extra: str) -> list[str]:
        return _red_loop(k, stmts, _simd(sched, simd_extra).split("\n"))

    full_outs, lin, stash = _passes(k, body, sched)
    for n, op in enumerate(k.ops):
        if op.space is not Space.row:
            continue
        if op.op not in REDUCE_OPS:
            row_stmts += body.value(n)
            continue
        a = op.args[0]
        t = ct.COMPUTE[op.dtype]
        stmts = _arg_stmts(body, n, stash, lin)
        if op.op is Op.SumReduce:
            row_stmts.append(f"{t} acc{n} = 0;")
            extra = f" reduction(|:acc{n})" if op.dtype is DType.bool else f" reduction(+:acc{n})"
            row_stmts += red_loop(stmts + _update(op, a, f"acc{n}", f"nan{n}"), extra)
            row_stmts.append(f"{t} v{n} = {ct.round_to(op.dtype, f'acc{n}')};")
        else:
            row_stmts.append(f"{t} acc{n} = {_MAX_INIT[t]}; int nan{n} = 0;")
            row_stmts += red_loop(stmts + _update(op, a, f"acc{n}", f"nan{n}"),
                                  f" reduction(max:acc{n}) reduction(|:nan{n})")
            row_stmts.append(f"{t} v{n} = nan{n} ? ({t})NAN : acc{n};" if t == "float" else f"{t} v{n} = acc{n};")
    if full_outs:
        row_stmts += red_loop(_out_stmts(body, full_outs, stash, lin, lambda need: []), "")
    for j, (o, b) in enumerate(k.outputs):
        if k.ops[o].space is Space.row:
            row_stmts.append(f"out{j}[r] = {ct.store(b.dtype, f'v{o}')};")
    return _function(k, row_stmts, ("r", rows), _par(math.prod(k.full), sched, sched.rows_per_thread))


def lanes_apply(kernel: Kernel) -> bool:
    """Reductions that vectorise across their innermost kept dim: it is the innermost dim (column reductions),
    or every load walks it with a stride of at most 2 (a pooling window's taps are the inner dims; on ResNet's
    3x3/2 max pool 1.5x faster than a row per output)."""
    k = normalize(kernel)
    if not k.reduce_axes or any(op.op is Op.Gather for op in k.ops):
        return False
    kept = [d for d in range(len(k.full)) if d not in k.reduce_axes]
    if not kept or k.full[kept[-1]] < 4:
        return False
    din = kept[-1]
    return din == len(k.full) - 1 or all(
        len(op.attr("view").strides) == len(k.full) and abs(op.attr("view").strides[din]) <= 2
        for op in k.ops if op.op is Leaf.Load and op.space is Space.full)


LANES = 64  # the default block of output columns a lanes reduction keeps in arrays
STAGE_MIN = 32  # blocks from this long copy their masked loads into arrays first
STAGE_MAX = 4096  # and up to this long (the arrays live on the stack)


def _stageable(k: Kernel, length: int, least: int = STAGE_MIN) -> dict[int, KOp]:
    """The masked full-space loads a loop over ``length`` elements of the innermost dim copies into arrays first,
    zero where the mask fails, by bounds from the mask (_stage_load): only for blocks of at least ``least``, long
    enough to pay for the bounds (14 columns ran 2x slower staged, 56 and 112 1.4-2x faster)."""
    if not least <= length <= STAGE_MAX:
        return {}
    return {i: op for i, op in enumerate(k.ops) if op.op is Leaf.Load and op.space is Space.full
            and op.attr("view").mask and not op.attr("view").never_valid and op.attr("view").shape == k.full}


def mask_bounds(v: str, step: int, bound: int) -> str:
    """A statement narrowing ``lo`` and ``hi`` to the w with 0 <= v + step*w < bound."""
    if step == 0:
        return f"if ((uint64_t)({v}) >= {bound}ULL) hi = 0;"
    if step > 0:
        return (f"lo = lum_max64(lo, lum_cdiv(-({v}), {step})); "
                f"hi = lum_min64(hi, lum_fdiv({bound} - 1 - ({v}), {step}) + 1);")
    return (f"lo = lum_max64(lo, lum_fdiv(({v}) - {bound}, {-step}) + 1); "
            f"hi = lum_min64(hi, lum_fdiv({v}, {-step}) + 1);")


def mask_range(view: View, ex: list[str], din: int) -> list[str]:
    """Statements declaring [lo, hi): the w < nl at which ``view`` is valid with index ``din`` at ``ex[din]`` + w
    (every other index at ``ex``)."""
    return ["int64_t lo = 0, hi = nl;",
            *(mask_bounds(affine(c, k, ex), c[din], b) for c, k, b in view_masks(view))]


def copy_between(dst: str, length: str, value: str) -> list[str]:
    """``dst[w]`` for w < ``length``: ``value`` (an expression in w) on [lo, hi), zero around it."""
    return [f"lo = lum_min64(lo, {length}); hi = lum_max64(hi, lo);",
            f"for (int64_t w = 0; w < lo; w++) {dst}[w] = 0;",
            "#pragma omp simd",
            f"for (int64_t w = lo; w < hi; w++) {dst}[w] = {value};",
            f"for (int64_t w = hi; w < {length}; w++) {dst}[w] = 0;"]


def _stage_load(n: int, op: KOp, din: int, lanes: int) -> list[str]:
    """Statements filling ``s<n>[0..nl)`` with load ``n`` at i<din> = c0 + j (every other index in scope):
    a strided copy between the bounds its mask allows, zeros around it."""
    view: View = op.attr("view")
    ex = [f"i{d}" if d != din else "c0" for d in range(len(view.shape))]
    co, k0 = view.strides, view.offset
    L = [f"{ct.COMPUTE[op.dtype]} s{n}[{lanes}];", "{", *_indent(mask_range(view, ex, din), 4)]
    L.append(f"    const {ct.STORAGE[op.dtype]} *src = in{op.attr('buf')} + {affine(co, k0, ex)};")
    L += [*_indent(copy_between(f"s{n}", "nl", ct.load(op.dtype, f"src[{co[din]} * w]")), 4), "}"]
    return L


def emit_reduction_lanes(kernel: Kernel, sched: ReductionSchedule) -> str:
    """Column reductions: each row value is an array over a block of ``lanes`` consecutive elements of the
    innermost kept dim, and every loop over those lanes is an ``omp simd`` loop (the reduced dims, inner in
    the space or not, loop around it: a depthwise conv sums its 3x3 taps over a block of output columns)."""
    w = _Lanes(normalize(kernel), sched)
    k = w.k
    full_outs, lin, stash = _passes(k, w.body, sched)
    st = w.tile_head()
    for n, op in enumerate(k.ops):
        if op.space is Space.row:
            st += w.row_value(n, op, stash, lin)
    if full_outs:
        pre = w.stage(k.full_cone([o for _, o, _ in full_outs]))
        st += _red_loop(k, pre + w.lane_loop(_out_stmts(w.body, full_outs, stash, lin, w.scalars)), [])
    row_outs = [(j, o, b) for j, (o, b) in enumerate(k.outputs) if k.ops[o].space is Space.row]
    if row_outs:
        rlin = w.body.linear(Space.row)
        st += w.lane_loop([f"out{j}[{rlin}] = {ct.store(b.dtype, f'a{o}[j]')};" for j, o, b in row_outs])
    return _function(k, st, ("t", w.tiles), _par(math.prod(k.full), sched))


class _Lanes:
    """A lanes reduction's pieces: a tile is one block of ``lanes`` columns of the innermost kept dim ``din``
    at one index of the other kept dims; row values are arrays ``a<n>`` over the block."""

    def __init__(self, k: Kernel, sched: ReductionSchedule):
        self.k, self.sched = k, sched
        self.body = Body(k)
        nd = len(k.full)
        self.din = max(d for d in range(nd) if d not in self.body.red)
        self.size = k.full[self.din]
        self.lanes = max(1, min(LANES if sched.lanes is None else sched.lanes, self.size))
        self.nch = -(-self.size // self.lanes)
        self.outer = [d for d in range(nd) if d not in self.body.red and d != self.din]
        self.tiles = math.prod(k.full[d] for d in self.outer) * self.nch
        self.arrays: set[int] = set()  # row ops whose values are in arrays
        # masked loads of the full space (a conv's padded window) are staged: the lane loops read them without
        # a test per element
        self.staged = _stageable(k, self.lanes)
        self.body.staged = set(self.staged)

    def tile_head(self) -> list[str]:
        """The tile's block start ``c0``, length ``nl`` and outer indices."""
        lanes, nch = self.lanes, self.nch
        # a block that always ends full has a length the compiler knows: loops without a remainder
        nl = str(lanes) if self.size % lanes == 0 else f"lum_min64({lanes}, {self.size} - c0)"
        st = [f"int64_t ro = t / {nch}, c0 = (t % {nch}) * {lanes}; const int64_t nl = {nl};", "(void)ro;"]
        for d, e in zip(self.outer, unravel("ro", tuple(self.k.full[d] for d in self.outer))):
            st.append(f"const int64_t i{d} = {e};")
        return st

    def scalars(self, ops: list[int]) -> list[str]:
        """The array values ``ops`` read, as scalars of the lane ``j``."""
        k = self.k
        used = {a for i in ops for a in k.ops[i].args if k.ops[a].space is Space.row and a in self.arrays} - set(ops)
        return [f"const {ct.COMPUTE[k.ops[a].dtype]} v{a} = a{a}[j];" for a in sorted(used)]

    def lane_loop(self, stmts: list[str], extra: str = "") -> list[str]:
        return [*_simd(self.sched, extra).split("\n"), "for (int64_t j = 0; j < nl; j++) {",
                f"    const int64_t i{self.din} = c0 + j;", *_indent(stmts, 4), "}"]

    def stage(self, ops: list[int]) -> list[str]:
        return [line for i in ops if i in self.staged
                for line in _stage_load(i, self.staged[i], self.din, self.lanes)]

    def row_value(self, n: int, op: KOp, stash: tuple[int, int, int] | None, lin: str) -> list[str]:
        """Statements filling the array of row op ``n``: elementwise over the lanes, or a reduction over the
        reduced dims around a lane loop."""
        k, lanes = self.k, self.lanes
        t = ct.COMPUTE[op.dtype]
        st = [f"{t} a{n}[{lanes}];"]
        self.arrays.add(n)
        if op.op not in REDUCE_OPS:
            return st + self.lane_loop([*self.scalars([n]), *self.body.value(n), f"a{n}[j] = v{n};"])
        a = op.args[0]
        stmts = self.scalars(k.full_cone([a])) + _arg_stmts(self.body, n, stash, lin) \
            + _update(op, a, f"a{n}[j]", f"nan{n}[j]")
        pre = self.stage(k.full_cone([a]))
        if op.op is Op.SumReduce:
            st += self.lane_loop([f"a{n}[j] = 0;"])
            st += _red_loop(k, pre + self.lane_loop(stmts), [])
            if op.dtype.compute is not op.dtype:
                st += self.lane_loop([f"a{n}[j] = {ct.round_to(op.dtype, f'a{n}[j]')};"])
            return st
        st.append(f"uint8_t nan{n}[{lanes}];")
        st += self.lane_loop([f"a{n}[j] = {_MAX_INIT[t]}; nan{n}[j] = 0;"])
        st += _red_loop(k, pre + self.lane_loop(stmts), [])
        if t == "float":
            st += self.lane_loop([f"if (nan{n}[j]) a{n}[j] = NAN;"])
        return st


def _inside(view: View, numel: int) -> bool:
    """Whether every element ``view`` addresses, its masks aside, lies inside a buffer of ``numel``."""
    lo, hi = box(view.strides, view.shape)
    return view.offset + lo >= 0 and view.offset + hi < numel
