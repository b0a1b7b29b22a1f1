"""Tensor: a (node, view) pair with the operations frontends compose from primitives.

Movement methods only change the view. Compute methods add one primitive node,
folding it to a Constant when all its sources are constant (so shape
arithmetic and constant subgraphs disappear while importing). Everything past
the primitives (sub, div, exp, matmul, softmax, erf, ...) is a composition.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from .dtypes import DType, promote
from .graph import ELEMENTWISE, Node, Op
from .reference import eval_node, read
from .view import View, _contiguous, reads_dim

FOLD_LIMIT = 1 << 22
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def storable(numel: int, consts: Iterable[Node]) -> bool:
    """Whether a value of ``numel`` elements computed from the constants ``consts`` is folded into a constant:
    up to FOLD_LIMIT, or no larger than one of them (a dequantised weight replaces its quantised one); a larger
    broadcast is computed by a kernel at run time rather than stored."""
    return numel <= FOLD_LIMIT or any(numel <= c.numel for c in consts)


def _node(op: Op, srcs, shape, dtype: DType, **attrs) -> Node:
    return Node(op, tuple(srcs), tuple(map(int, shape)), dtype, attrs)


class Tensor:
    __slots__ = ("node", "view")

    def __init__(self, node: Node, view: View | None = None):
        self.node = node
        self.view = view if view is not None else _contiguous(node.shape)  # a node's shape is a tuple of ints

    # -- construction ------------------------------------------------------
    @staticmethod
    def input(name: str, shape: Sequence[int], dtype: DType) -> Tensor:
        return Tensor(_node(Op.Input, (), shape, dtype, name=name))

    @staticmethod
    def const(value, dtype: DType | None = None) -> Tensor:
        arr = np.asarray(value)
        if dtype is None:
            dtype = DType.from_numpy(arr.dtype) if arr.dtype != np.float64 else DType.float32
            if arr.dtype == np.int64 or arr.dtype.kind in "iu":
                dtype = DType.int64 if arr.dtype.itemsize == 8 or arr.dtype.kind == "u" else DType.int32
        arr = np.ascontiguousarray(arr.astype(dtype.np, copy=False)).reshape(arr.shape)
        if arr.size > 1 and _uniform(arr):
            return Tensor.full(arr.shape, arr.reshape(-1)[0], dtype)
        return Tensor(_node(Op.Constant, (), arr.shape, dtype, value=arr))

    @staticmethod
    def full(shape: Sequence[int], value, dtype: DType) -> Tensor:
        node = Node(Op.Constant, (), (), dtype, {"value": np.asarray(value).astype(dtype.np)})
        return Tensor(node, _splat(tuple(map(int, shape))))  # one value read everywhere

    @staticmethod
    def iota(shape: Sequence[int], axis: int, dtype: DType = DType.int64) -> Tensor:
        shape = tuple(shape)
        base = tuple(s if k == axis else 1 for k, s in enumerate(shape))
        if shape[axis] <= 4096:
            return Tensor.const(np.arange(shape[axis]).reshape(base).astype(dtype.np), dtype).expand(shape)
        return Tensor(_node(Op.Iota, (), base, dtype, axis=axis)).expand(shape)

    # -- properties --------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.view.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return self.view.ndim

    @property
    def numel(self) -> int:
        return self.view.numel

    @property
    def is_const(self) -> bool:
        return self.node.op is Op.Constant

    def numpy(self) -> np.ndarray:
        """The value of a constant tensor."""
        assert self.is_const, "not a constant"
        return np.array(read(self.node.attrs["value"], self.view))

    def scalar(self):
        """The single value of a constant tensor whose elements are all equal, else None."""
        if not self.is_const:
            return None
        v = self.node.one_value(self.view)
        if v is not None:
            return v
        if self.numel == 1:
            return self.numpy().reshape(-1)[0].item()
        return None

    def __repr__(self) -> str:
        return f"Tensor({self.node!r}, {self.view!r})"

    # -- movement ----------------------------------------------------------
    def reshape(self, shape: Sequence[int]) -> Tensor:
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.numel // known if s == -1 else s for s in shape)
        if math.prod(shape) != self.numel:
            raise ValueError(f"cannot reshape {list(self.shape)} to {list(shape)}")
        v = self.view.reshape(shape)
        if v is None:
            return self.contiguous().reshape(shape)
        return Tensor(self.node, v)

    def permute(self, order: Sequence[int]) -> Tensor:
        order = tuple(int(o) % max(self.ndim, 1) for o in order)
        if order == tuple(range(self.ndim)):
            return self
        return Tensor(self.node, self.view.permute(order))

    def expand(self, shape: Sequence[int]) -> Tensor:
        if type(shape) is tuple and shape == self.view.shape:
            return self
        shape = tuple(map(int, shape))
        t = self
        if len(shape) > t.ndim:
            t = t.reshape((1,) * (len(shape) - t.ndim) + t.shape)
        if t.shape == shape:
            return t
        return Tensor(t.node, t.view.expand(shape))

    def slice(self, starts: Sequence[int], steps: Sequence[int], sizes: Sequence[int]) -> Tensor:
        return Tensor(self.node, self.view.slice(tuple(starts), tuple(steps), tuple(sizes)))

    def shrink(self, ranges: Sequence[tuple[int, int]]) -> Tensor:
        return Tensor(self.node, self.view.shrink(tuple(ranges)))

    def pad(self, pads: Sequence[tuple[int, int]], value=0.0) -> Tensor:
        pads = tuple((int(a), int(b)) for a, b in pads)
        if all(a == 0 and b == 0 for a, b in pads):
            return self
        t = Tensor(self.node, self.view.pad(pads))
        if value == 0 or all(a <= 0 and b <= 0 for a, b in pads):
            return t
        inside = Tensor.full(self.shape, True, DType.bool)
        inside = Tensor(inside.node, inside.view.pad(pads))
        return inside.where(t, Tensor.full(t.shape, value, self.dtype))

    def window(self, dim: int, out: int, size: int, stride: int = 1, dilation: int = 1) -> Tensor:
        return Tensor(self.node, self.view.window(dim, out, size, stride, dilation))

    def squeeze(self, axes: Sequence[int]) -> Tensor:
        gone = {a % self.ndim for a in axes}
        return self.reshape(tuple(s for k, s in enumerate(self.shape) if k not in gone))

    def unsqueeze(self, axes: Sequence[int]) -> Tensor:
        n = self.ndim + len(axes)
        axes = sorted(a % n for a in axes)
        shape = list(self.shape)
        for a in axes:
            shape.insert(a, 1)
        return self.reshape(shape)

    def flip(self, axis: int) -> Tensor:
        axis %= self.ndim
        starts = tuple(s - 1 if k == axis else 0 for k, s in enumerate(self.shape))
        steps = tuple(-1 if k == axis else 1 for k in range(self.ndim))
        return self.slice(starts, steps, self.shape)

    def transpose(self, a: int = -2, b: int = -1) -> Tensor:
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    # -- primitive compute -------------------------------------------------
    @staticmethod
    def cat(parts: Sequence[Tensor], axis: int) -> Tensor:
        """``parts`` (one dtype, equal off ``axis``, at least one) concatenated along ``axis`` as a sum of
        zero-padded views (padded areas read 0): a chain of sums, which the partition fuses into one kernel (a
        balanced tree's two halves were two kernels, one writing a whole output of mostly zeros), and which the
        runtime can elide (runtime/alias.py)."""
        total = sum(t.shape[axis] for t in parts)
        padded, before = [], 0
        for t in parts:
            pads = [(0, 0)] * t.ndim
            pads[axis] = (before, total - before - t.shape[axis])
            padded.append(t.pad(pads))
            before += t.shape[axis]
        return functools.reduce(Tensor.add, padded)

    @staticmethod
    def _broadcast(*ts: Tensor) -> list[Tensor]:
        first = ts[0].view.shape
        for t in ts:  # a loop, not all() over a generator: this runs for every op made
            if t.view.shape != first:
                shape = broadcast_shape(*(t.shape for t in ts))
                return [t.expand(shape) for t in ts]
        return list(ts)

    @staticmethod
    def _make(op: Op, srcs: Sequence[Tensor], shape, dtype: DType, **attrs) -> Tensor:
        node = Node(op, tuple([(t.node, t.view) for t in srcs]), tuple(map(int, shape)), dtype, attrs)
        for t in srcs:
            if t.node.op is not Op.Constant:
                return Tensor(node)
        return _fold(node, srcs) if srcs else Tensor(node)

    def _elementwise(self, op: Op, *others: Tensor, dtype: DType | None = None) -> Tensor:
        ts = Tensor._broadcast(self, *others)
        return Tensor._make(op, ts, ts[0].shape, dtype or self.dtype)

    def _coerce(self, other) -> Tensor:
        if isinstance(other, Tensor):
            return other
        return Tensor.full(self.shape, other, self.dtype)

    def _binary(self, op: Op, other, dtype: DType | None = None) -> Tensor:
        other = self._coerce(other)
        a, b = self, other
        if a.dtype != b.dtype:
            t = promote(a.dtype, b.dtype)
            a, b = a.cast(t), b.cast(t)
        return a._elementwise(op, b, dtype=dtype)

    def exp2(self) -> Tensor:
        return self._elementwise(Op.Exp2)

    def log2(self) -> Tensor:
        return self._elementwise(Op.Log2)

    def sin(self) -> Tensor:
        return self._elementwise(Op.Sin)

    def sqrt(self) -> Tensor:
        return self._elementwise(Op.Sqrt)

    def recip(self) -> Tensor:
        return self._elementwise(Op.Recip)

    def cast(self, dtype: DType) -> Tensor:
        if dtype == self.dtype:
            return self
        return Tensor._make(Op.Cast, [self], self.shape, dtype)

    def add(self, other) -> Tensor:
        return self._binary(Op.Add, other)

    def mul(self, other) -> Tensor:
        return self._binary(Op.Mul, other)

    def mod(self, other) -> Tensor:
        """Truncated remainder (C's fmod / %)."""
        return self._binary(Op.Mod, other)

    def lt(self, other) -> Tensor:
        return self._binary(Op.LessThan, other, dtype=DType.bool)

    def where(self, a, b) -> Tensor:
        """self ? a : b, with self a bool tensor."""
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            dt = DType.float32 if isinstance(a, float) or isinstance(b, float) else DType.int64
            a = Tensor.full(self.shape, a, dt)
        a = a if isinstance(a, Tensor) else b._coerce(a)
        b = b if isinstance(b, Tensor) else a._coerce(b)
        if a.dtype != b.dtype:
            t = promote(a.dtype, b.dtype)
            a, b = a.cast(t), b.cast(t)
        c = self if self.dtype is DType.bool else self.cast(DType.bool)
        return c._elementwise(Op.Where, a, b, dtype=a.dtype)

    def _reduce(self, op: Op, axes, keepdim: bool) -> Tensor:
        axes = tuple(sorted({a % self.ndim for a in axes})) if self.ndim else ()
        requested = set(axes)
        axes = tuple(a for a in axes if self.shape[a] != 1)
        if not axes:
            out = self
        else:
            dtype = self.dtype
            src = self if self.dtype is not DType.bool else self.cast(DType.int64)
            if op is Op.MaxReduce and self.dtype is DType.bool:
                dtype = DType.int64
            shape = tuple(1 if k in axes else s for k, s in enumerate(self.shape))
            out = Tensor._make(op, [src], shape, src.dtype if op is Op.SumReduce else dtype, axes=axes)
            if self.dtype is DType.bool:
                out = out.ne(0) if op is Op.MaxReduce else out
        if keepdim:
            return out
        return out.reshape(tuple(s for k, s in enumerate(self.shape) if k not in requested))

    def sum(self, axes=None, keepdim: bool = False) -> Tensor:
        axes = range(self.ndim) if axes is None else axes
        return self._reduce(Op.SumReduce, tuple(axes), keepdim)

    def max(self, axes=None, keepdim: bool = False) -> Tensor:
        axes = range(self.ndim) if axes is None else axes
        return self._reduce(Op.MaxReduce, tuple(axes), keepdim)

    def gather(self, index: Tensor, axis: int) -> Tensor:
        """out[i] = self[i with i[axis] := index[i]]; shapes equal except along axis (GatherElements)."""
        axis %= self.ndim
        if index.dtype not in (DType.int64, DType.int32):
            index = index.cast(DType.int64)
        size = self.shape[axis]
        index = index.lt(0).where(index.add(size), index)
        out_shape = broadcast_shape(tuple(s for k, s in enumerate(self.shape) if k != axis),
                                    tuple(s for k, s in enumerate(index.shape) if k != axis))
        out_shape = (*out_shape[:axis], index.shape[axis], *out_shape[axis:])
        data = self.expand((*out_shape[:axis], size, *out_shape[axis + 1:]))
        index = index.expand(out_shape)
        return Tensor._make(Op.Gather, [data, index], out_shape, self.dtype, axis=axis)

    def contiguous(self) -> Tensor:
        if self.view.is_contiguous and self.view.shape == self.node.shape:
            return self
        return Tensor._make(Op.Contiguous, [self], self.shape, self.dtype)

    # -- compositions: arithmetic -----------------------------------------
    def neg(self) -> Tensor:
        if self.dtype is DType.bool:
            return self.logical_not()
        return self.mul(-1)

    def sub(self, other) -> Tensor:
        return self.add(self._coerce(other).neg())

    def div(self, other) -> Tensor:
        other = self._coerce(other)
        x = self.expand(broadcast_shape(self.shape, other.shape))  # the scalar shortcut keeps the shape
        if x.dtype.is_int and other.dtype.is_int:
            return x.int_div(other)
        s = other.scalar()
        if s is not None and s != 0 and x.dtype.is_float and math.frexp(s)[0] in (0.5, -0.5):
            return x.mul(1.0 / s)  # a power of two: the product is the quotient
        if not other.dtype.is_float:
            other = other.cast(x.dtype if x.dtype.is_float else DType.float32)
        return x._binary(Op.Div, other)

    def int_div(self, other) -> Tensor:
        """Integer division truncating toward zero, as C and ONNX Div do."""
        other = self._coerce(other)
        r = self.mod(other)
        return self.sub(r)._exact_div(other)

    def _exact_div(self, other: Tensor) -> Tensor:
        # other divides self exactly: round the float32 quotient (exact while |self| < 2**24)
        f = self.cast(DType.float32).mul(other.cast(DType.float32).recip())
        return f.add(f.lt(0).where(-0.5, 0.5)).cast(self.dtype)

    def pow(self, other) -> Tensor:
        other = self._coerce(other)
        x = self.expand(broadcast_shape(self.shape, other.shape))  # the scalar shortcuts keep the shape
        s = other.scalar()
        if s is not None:
            if s == 0:
                return Tensor.full(x.shape, 1, x.dtype)
            if s == 1:
                return x
            if s == 2:
                return x.mul(x)
            if s == 3:
                return x.mul(x).mul(x)
            if s == 0.5:
                return x.sqrt()
            if s == -1:
                return x.recip()
            if s == -0.5:
                return x.sqrt().recip()
        if x.dtype.is_int:
            out = x.cast(DType.float32).pow(other.cast(DType.float32))
            return out.add(out.lt(0).where(-0.5, 0.5)).cast(x.dtype)
        other = other.cast(x.dtype)
        mag = x.abs().log2().mul(other).exp2()
        odd = other.mod(2.0).abs().eq(1.0)
        is_int = other.floor().eq(other)
        neg = x.lt(0)
        signed = (neg & odd).where(mag.neg(), mag)
        nan = Tensor.full(signed.shape, float("nan"), x.dtype)
        out = (neg & is_int.logical_not()).where(nan, signed)
        if s is not None and math.isfinite(s):  # a constant exponent but 0 (above): 1^y is exp2(0)
            return out
        # x^0 and 1^y are 1 whatever the other (C's pow): log2 and exp2 would give 0 * inf, a NaN
        return (other.eq(0.0) | x.eq(1.0)).where(Tensor.full(out.shape, 1, x.dtype), out)

    def exp(self) -> Tensor:
        if self.dtype in (DType.float16, DType.bfloat16):  # x*log2(e) rounded to half would cost 0.2%
            return self.cast(DType.float32).exp().cast(self.dtype)
        return self.mul(LOG2E).exp2()

    def log(self) -> Tensor:
        if self.dtype in (DType.float16, DType.bfloat16):
            return self.cast(DType.float32).log().cast(self.dtype)
        return self.log2().mul(LN2)

    def cos(self) -> Tensor:
        return self.add(math.pi / 2).sin()

    def tan(self) -> Tensor:
        return self.sin().div(self.cos())

    def rsqrt(self) -> Tensor:
        return self.sqrt().recip()

    def square(self) -> Tensor:
        return self.mul(self)

    # -- compositions: comparison and logic --------------------------------
    def gt(self, other) -> Tensor:
        return self._coerce(other).lt(self)

    def le(self, other) -> Tensor:
        other = self._coerce(other)
        if self.dtype.is_float or other.dtype.is_float:  # false where either side is NaN
            return self.lt(other) | self.eq(other)
        return self.gt(other).logical_not()

    def ge(self, other) -> Tensor:
        return self._coerce(other).le(self)

    def eq(self, other) -> Tensor:
        other = self._coerce(other)
        differ = self.lt(other) | other.lt(self)
        if self.dtype.is_float or other.dtype.is_float:
            for t in (self, other):
                v = t.scalar()
                if v is None or v != v:
                    differ = differ | t.isnan()
        return differ.logical_not()

    def ne(self, other) -> Tensor:
        return self.eq(other).logical_not()

    def logical_not(self) -> Tensor:
        b = self if self.dtype is DType.bool else self.ne(0)
        return b.lt(True)

    def __and__(self, other: Tensor) -> Tensor:
        return self._bool().mul(other._bool())

    def __or__(self, other: Tensor) -> Tensor:
        return self._bool().add(other._bool())

    def __xor__(self, other: Tensor) -> Tensor:
        a, b = self._bool(), other._bool()
        return a.lt(b) | b.lt(a)

    def _bool(self) -> Tensor:
        return self if self.dtype is DType.bool else self.cast(DType.bool)

    def isnan(self) -> Tensor:
        inf = float("inf")
        return (self.lt(inf) | self.gt(-inf)).logical_not()

    def isinf(self, pos: bool = True, neg: bool = True) -> Tensor:
        inf = float("inf")
        p = self.eq(inf) if pos else None
        n = self.eq(-inf) if neg else None
        if p is not None and n is not None:
            return p | n
        return p if p is not None else n if n is not None else Tensor.full(self.shape, False, DType.bool)

    # -- compositions: elementwise nonlinearities --------------------------
    def maximum(self, other) -> Tensor:
        other = self._coerce(other)
        a, b = Tensor._broadcast(self, other)
        # NaN propagates as in numpy.maximum
        return a.lt(b).where(b, a) if not a.dtype.is_float else (a.lt(b) | b.isnan()).where(b, a)

    def minimum(self, other) -> Tensor:
        other = self._coerce(other)
        a, b = Tensor._broadcast(self, other)
        return b.lt(a).where(b, a) if not a.dtype.is_float else (b.lt(a) | b.isnan()).where(b, a)

    def nonnegative(self, depth: int = 8) -> bool:
        """Whether every value is at least 0 (or NaN), as the nodes that make it show within ``depth`` steps
        (a view reads its node's values or 0)."""
        return _nonnegative(self.node, depth)

    def relu(self) -> Tensor:
        zero = Tensor.full(self.shape, 0, self.dtype)  # one node both read (CSE would merge two)
        return self.lt(zero).where(zero, self)

    def abs(self) -> Tensor:
        return self.lt(0).where(self.neg(), self)

    def sign(self) -> Tensor:
        one = Tensor.full(self.shape, 1, self.dtype)
        zero = Tensor.full(self.shape, 0, self.dtype)
        return self.lt(0).where(one.neg(), self.gt(0).where(one, zero))

    def sigmoid(self) -> Tensor:
        return self.neg().exp().add(1).recip()

    def tanh(self) -> Tensor:
        # 2*sigmoid(2x) - 1, with small |x| by its odd series to keep relative precision
        big = self.mul(2).sigmoid().mul(2).sub(1)
        x2 = self.mul(self)
        small = self.mul(x2.mul(x2.mul(2.0 / 15).sub(1.0 / 3)).add(1))
        return self.abs().lt(0.0625).where(small, big)

    def erf(self) -> Tensor:
        # Abramowitz-Stegun 7.1.26 is 1.5e-7 absolute; refine with a Taylor series near 0
        a = self.abs()
        t = a.mul(0.3275911).add(1).recip()
        poly = t.mul(t.mul(t.mul(t.mul(t.mul(1.061405429).add(-1.453152027)).add(1.421413741))
                             .add(-0.284496736)).add(0.254829592))
        big = poly.mul(a.mul(a).neg().exp()).neg().add(1)
        x2 = self.mul(self)
        coeffs = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7)]
        p = Tensor.full(self.shape, coeffs[-1], self.dtype)
        for c in reversed(coeffs[:-1]):
            p = p.mul(x2).add(c)
        series = self.mul(p).mul(1.1283791670955126)
        return a.lt(0.5).where(series, self.lt(0).where(big.neg(), big))

    def floor(self) -> Tensor:
        if not self.dtype.is_float:
            return self
        r = self.round()
        return self.lt(r).where(r.sub(1), r)

    def ceil(self) -> Tensor:
        return self.neg().floor().neg()

    def round(self) -> Tensor:
        """Round half to even: x plus and minus 2**23 with x's sign leaves no fraction bits in the sum, which the
        float32 arithmetic itself rounds to nearest, ties to even (halves go through float32, where their values
        are exact); what is whole already (|x| >= 2**23), NaN and infinities stay. Nine vector operations, where a
        conversion to int64 and its parity took 25 (a QuantizeLinear's epilogue on 0.8M elements, 2 threads:
        0.73 -> 0.45 ms)."""
        if not self.dtype.is_float:
            return self
        x = self.cast(DType.float32)
        big = 2.0 ** 23
        m = x.lt(0).where(-big, big)
        return x.abs().lt(big).where(x.add(m).sub(m), x).cast(self.dtype)

    def atan(self) -> Tensor:
        # reduce to [0, 1] by atan(x) = pi/2 - atan(1/x), then a minimax polynomial in x^2
        a = self.abs()
        inv = a.gt(1)
        z = inv.where(a.recip(), a)
        z2 = z.mul(z)
        coeffs = [-0.0040540580, 0.0218612288, -0.0559098861, 0.0964200441, -0.1390853351,
                  0.1994653599, -0.3332985605, 0.9999993329]
        p = Tensor.full(z.shape, coeffs[0], self.dtype)
        for c in coeffs[1:]:
            p = p.mul(z2).add(c)
        r = p.mul(z)
        r = inv.where(r.neg().add(math.pi / 2), r)
        return self.lt(0).where(r.neg(), r)

    def asin(self) -> Tensor:
        return self.div(self.mul(self).neg().add(1).sqrt()).atan_full(self)

    def atan_full(self, x: Tensor) -> Tensor:
        # asin(x) = atan(x / sqrt(1 - x^2)), exact at |x| = 1
        r = self.atan()
        half = Tensor.full(x.shape, math.pi / 2, x.dtype)
        return x.abs().eq(1).where(x.lt(0).where(half.neg(), half), r)

    def acos(self) -> Tensor:
        return self.asin().neg().add(math.pi / 2)

    def softplus(self) -> Tensor:
        # log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|))
        return self.relu().add(self.abs().neg().exp().add(1).log())

    # -- compositions: reductions ------------------------------------------
    def mean(self, axes=None, keepdim: bool = False) -> Tensor:
        axes = tuple(range(self.ndim)) if axes is None else tuple(axes)
        n = math.prod(self.shape[a] for a in axes) if axes else 1
        s = self.sum(axes, keepdim)
        return s.mul(1.0 / n) if self.dtype.is_float else s.int_div(n)

    def min(self, axes=None, keepdim: bool = False) -> Tensor:
        if self.dtype is DType.bool:
            return self.logical_not().max(axes, keepdim).logical_not()
        return self.neg().max(axes, keepdim).neg()

    def softmax(self, axis: int = -1) -> Tensor:
        m = self.max((axis,), keepdim=True)
        e = self.sub(m.expand(self.shape)).exp()
        return e.mul(e.sum((axis,), keepdim=True).recip().expand(self.shape))

    def log_softmax(self, axis: int = -1) -> Tensor:
        m = self.max((axis,), keepdim=True)
        z = self.sub(m.expand(self.shape))
        return z.sub(z.exp().sum((axis,), keepdim=True).log().expand(self.shape))

    def argmax(self, axis: int, keepdim: bool = True, last: bool = False) -> Tensor:
        axis %= self.ndim
        n = self.shape[axis]
        m = self.max((axis,), keepdim=True).expand(self.shape)
        idx = Tensor.iota(self.shape, axis, DType.int64)
        hit = self.eq(m) | (self.isnan() if self.dtype.is_float else Tensor.full(self.shape, False, DType.bool))
        if last:
            r = hit.where(idx, Tensor.full(self.shape, -1, DType.int64)).max((axis,), keepdim)
        else:
            r = hit.where(idx.neg().add(n - 1), Tensor.full(self.shape, -1, DType.int64)).max((axis,), keepdim)
            r = r.neg().add(n - 1)
        return r

    def matmul(self, other: Tensor) -> Tensor:
        a, b = self, other
        if a.ndim == 1:
            return a.unsqueeze([0]).matmul(b).squeeze([-2])
        if b.ndim == 1:
            return a.matmul(b.unsqueeze([1])).squeeze([-1])
        if a.dtype != b.dtype:
            t = promote(a.dtype, b.dtype)
            a, b = a.cast(t), b.cast(t)
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
        m, k = a.shape[-2:]
        k2, n = b.shape[-2:]
        if k != k2:
            raise ValueError(f"matmul shapes {list(a.shape)} and {list(b.shape)} do not match")
        a = a.expand((*batch, m, k)).reshape((*batch, m, 1, k)).expand((*batch, m, n, k))
        b = b.expand((*batch, k, n)).transpose(-1, -2).reshape((*batch, 1, n, k)).expand((*batch, m, n, k))
        return a.mul(b).sum((-1,))


@functools.lru_cache(maxsize=1 << 12)
def _splat(shape: tuple[int, ...]) -> View:
    """The view that reads one value at every index of ``shape`` (immutable: equal shapes share one)."""
    return View(shape, (0,) * len(shape))


def _uniform(arr: np.ndarray) -> bool:
    flat = arr.reshape(-1)
    # the first elements settle almost every weight while touching one page of a mapped file
    return bool((flat[:64] == flat[0]).all() and (flat == flat[0]).all())


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(n):
        dims = {s[k - n + len(s)] for s in shapes if k - n + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _fold(node: Node, srcs: Sequence[Tensor]) -> Tensor:
    if (all(t.node.attrs["value"].ndim == 0 and not t.view.mask for t in srcs)
            and node.op not in (Op.SumReduce, Op.MaxReduce, Op.Gather)):
        scalar = Node(node.op, tuple((t.node, View((), ())) for t in srcs), (), node.dtype, dict(node.attrs))
        val = eval_node(scalar, [t.node.attrs["value"] for t in srcs])
        return Tensor.full(node.shape, np.asarray(val).reshape(()), node.dtype)
    if node.op in ELEMENTWISE and node.op is not Op.Contiguous and (
            dims := [d for d, n in enumerate(node.shape) if n > 1 and not any(reads_dim(t.view, d) for t in srcs)]):
        # computed along the dims some source moves along, then broadcast (a copy stays one: it is asked for to
        # lay a view out whole): a constant index table wrapped as a gather reads it (a row of 160) stays that
        # row, not a full-size table folded through its broadcast
        ranges = tuple((0, 1) if d in dims else (0, n) for d, n in enumerate(node.shape))
        small = [Tensor(t.node, t.view.shrink(ranges)) for t in srcs]
        narrow = Node(node.op, tuple((t.node, t.view) for t in small), tuple(b for _, b in ranges), node.dtype,
                      dict(node.attrs))
        return _fold(narrow, small).expand(node.shape)
    if not storable(node.numel, (t.node for t in srcs)):
        return Tensor(node)
    vals = [read(t.node.attrs["value"], t.view) for t in srcs]
    return Tensor.const(np.ascontiguousarray(eval_node(node, vals)).reshape(node.shape), node.dtype)


def _nonnegative(n: Node, depth: int) -> bool:
    if n.op is Op.Constant:
        return not np.any(np.asarray(n.attrs["value"]) < 0)
    if depth == 0:
        return False
    if n.op in (Op.Exp2, Op.Sqrt):
        return True
    if n.op in (Op.Add, Op.Mul, Op.MaxReduce, Op.SumReduce, Op.Contiguous):  # not a quotient: 1 / -0.0 < 0
        return all(_nonnegative(s, depth - 1) for s, _ in n.srcs)
    if n.op is not Op.Where:
        return False
    (c, cv), (a, _), (b, bv) = n.srcs
    if not _nonnegative(a, depth - 1):
        return False
    # Where(x < lo, a, x) with lo and a at least 0 (a ReLU, a Clip's lower bound, a maximum): x where not below lo
    return _nonnegative(b, depth - 1) or _true_below(c, cv, (b, bv))


def _true_below(c: Node, cv: View, x: tuple[Node, View]) -> bool:
    """Whether the condition ``c`` read through ``cv`` holds wherever ``x`` is below some value of at least 0:
    it is x < lo, or an or (a sum of bools) of that and more."""
    if not cv.is_contiguous:
        return False
    if c.op is Op.LessThan:
        return c.srcs[0] == x and _nonnegative(c.srcs[1][0], 0)
    return c.op is Op.Add and c.dtype is DType.bool and any(_true_below(s, v, x) for s, v in c.srcs)
