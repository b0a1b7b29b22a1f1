"""Shape and movement ONNX ops; all of them are views or fold to constants."""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, Tensor, broadcast_shape
from ..ir.tensor import FOLD_LIMIT
from .importer import array_dtype, const_tensor, onnx_dtype, sparse_value
from .registry import OpContext, need, need_ints, op

MAX_RANGE = 1 << 31


def axes_arg(ctx: OpContext, since: int, index: int = 1) -> list[int] | None:
    """``axes`` from the attribute before opset ``since``, from input ``index`` from it on."""
    if ctx.opset < since:
        a = ctx.attr("axes")
        return None if a is None else [int(x) for x in a]
    return ctx.ints(index)


def norm_axis(a: int, rank: int) -> int:
    if not -rank <= a < rank:
        raise ValueError(f"axis {a} out of range for rank {rank}")
    return a % rank


@op("Constant")
def constant(ctx: OpContext) -> Tensor:
    if "value" in ctx.attrs:
        return const_tensor(ctx.attrs["value"])
    if "value_float" in ctx.attrs:
        return const_tensor(np.float32(ctx.attrs["value_float"]))
    if "value_floats" in ctx.attrs:
        return const_tensor(np.asarray(ctx.attrs["value_floats"], np.float32))
    if "value_int" in ctx.attrs:
        return const_tensor(np.int64(ctx.attrs["value_int"]))
    if "value_ints" in ctx.attrs:
        return const_tensor(np.asarray(ctx.attrs["value_ints"], np.int64))
    if "sparse_value" in ctx.attrs:
        return const_tensor(sparse_value(ctx.attrs["sparse_value"]))
    raise ValueError("Constant without a supported value attribute (string constants are not supported)")


@op("ConstantOfShape")
def constant_of_shape(ctx: OpContext) -> Tensor:
    shape = need_ints(ctx, 0)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in {shape}")
    value = ctx.attr("value")
    if value is None:
        return Tensor.full(shape, 0.0, DType.float32)
    value = np.asarray(value).reshape(-1)
    return Tensor.full(shape, value[0], array_dtype(value.dtype))


@op("Shape")
def shape_op(ctx: OpContext) -> Tensor:
    shape = need(ctx, 0).shape
    r = len(shape)
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    end = r if end is None else int(end)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return const_tensor(np.asarray(shape[start:end], np.int64).reshape(-1))


@op("Size")
def size_op(ctx: OpContext) -> Tensor:
    return const_tensor(np.int64(need(ctx, 0).numel))


@op("Reshape")
def reshape(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    spec = need_ints(ctx, 1) if ctx.opset >= 5 else [int(s) for s in ctx.attr("shape")]
    allowzero = bool(ctx.attr("allowzero", 0))
    shape = []
    for k, s in enumerate(spec):
        if s == 0 and not allowzero:
            if k >= x.ndim:
                raise ValueError(f"shape {spec}: 0 at dim {k} copies a dim the input (rank {x.ndim}) lacks")
            shape.append(x.shape[k])
        else:
            shape.append(s)
    if shape.count(-1) > 1:
        raise ValueError(f"shape {spec} has more than one -1")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or x.numel % known:
            raise ValueError(f"cannot reshape {list(x.shape)} to {spec}")
        shape[shape.index(-1)] = x.numel // known
    if any(s < 0 for s in shape) or math.prod(shape) != x.numel:
        raise ValueError(f"cannot reshape {list(x.shape)} to {spec}")
    return x.reshape(shape)


@op("Flatten")
def flatten(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axis = int(ctx.attr("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise ValueError(f"axis {axis} out of range for rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape((math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@op("Squeeze")
def squeeze(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axes = axes_arg(ctx, 13)
    if axes is None:
        axes = [k for k, s in enumerate(x.shape) if s == 1]
    axes = [norm_axis(a, x.ndim) for a in axes]
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {x.shape[a]}")
    return x.squeeze(axes) if axes else x


@op("Unsqueeze")
def unsqueeze(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    axes = axes_arg(ctx, 13) or []
    n = x.ndim + len(axes)
    axes = [norm_axis(a, n) for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axes {axes}")
    return x.unsqueeze(axes)


@op("Transpose")
def transpose(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    perm = ctx.attr("perm")
    perm = list(reversed(range(x.ndim))) if perm is None else [norm_axis(int(p), x.ndim) for p in perm]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"perm {perm} is not a permutation of {x.ndim} axes")
    return x.permute(perm)


@op("Expand")
def expand(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    shape = broadcast_shape(x.shape, tuple(need_ints(ctx, 1)))
    return x.expand(shape)


def concat(xs: list[Tensor], axis: int) -> Tensor:
    """Concatenate along ``axis`` as a sum of zero-padded views (padded areas read 0); the
    parts take the first one's dtype."""
    rank = xs[0].ndim
    axis = norm_axis(axis, rank)
    for t in xs[1:]:
        if t.ndim != rank or any(a != b for k, (a, b) in enumerate(zip(t.shape, xs[0].shape)) if k != axis):
            raise ValueError(f"concat shapes {[list(t.shape) for t in xs]} differ off axis {axis}")
    dtype = xs[0].dtype
    total = sum(t.shape[axis] for t in xs)
    if all(t.is_const for t in xs) and math.prod(xs[0].shape[:axis] + xs[0].shape[axis + 1:]) * total <= FOLD_LIMIT:
        # one numpy call rather than folding a sum of padded views
        return const_tensor(np.concatenate([t.cast(dtype).numpy() for t in xs], axis), dtype)
    parts = [t.cast(dtype) for t in xs if t.shape[axis]]
    if not parts:
        shape = list(xs[0].shape)
        shape[axis] = 0
        return Tensor.full(shape, 0, dtype)
    return Tensor.cat(parts, axis)


def stack(xs: list[Tensor], axis: int) -> Tensor:
    """``xs`` (one shape) stacked along a new ``axis``."""
    return concat([t.unsqueeze([axis]) for t in xs], axis)


@op("Concat")
def concat_op(ctx: OpContext) -> Tensor:
    xs = [t for t in ctx.inputs if t is not None]
    axis = ctx.attr("axis", 1 if ctx.opset < 4 else None)
    if axis is None:
        raise ValueError("Concat without an axis")
    return concat(xs, int(axis))


@op("Split")
def split(ctx: OpContext) -> list[Tensor]:
    x = need(ctx, 0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.ndim)
    d = x.shape[axis]
    n_out = len(ctx.node.output)
    sizes = [int(s) for s in ctx.attr("split")] if ctx.opset < 13 and ctx.attr("split") is not None else None
    if ctx.opset >= 13:
        sizes = ctx.ints(1)
    if sizes is None:
        n = int(ctx.attr("num_outputs", n_out))
        chunk = -(-d // n) if n else 0
        if ctx.opset < 18 and d % n:
            raise ValueError(f"cannot split {d} evenly into {n}")
        sizes = [min(chunk, max(d - chunk * k, 0)) for k in range(n)]
    return split_sizes(x, axis, sizes)


def split_sizes(x: Tensor, axis: int, sizes: list[int]) -> list[Tensor]:
    """``x`` cut along ``axis`` into consecutive parts of ``sizes``."""
    if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
        raise ValueError(f"split sizes {sizes} do not add up to {x.shape[axis]}")
    outs, start = [], 0
    for s in sizes:
        ranges = [(0, e) for e in x.shape]
        ranges[axis] = (start, start + s)
        outs.append(x.shrink(ranges))
        start += s
    return outs


def _slice_params(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """(first index, count) of ONNX Slice along one dim, with its clamping rules."""
    if step == 0:
        raise ValueError("slice step 0")
    if start < 0:
        start += dim
    if end in (2 ** 31 - 1, 2 ** 63 - 1):
        # INT_MAX means "to the end" in the slicing direction (numpy's None), as onnxruntime reads it
        end = dim if step > 0 else -1
    elif end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    count = max(0, -(-(end - start) // step))
    return start, count


@op("Slice")
def slice_op(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    if ctx.opset < 10:
        starts, ends = [int(v) for v in ctx.attr("starts")], [int(v) for v in ctx.attr("ends")]
        axes = ctx.attr("axes")
        steps = None
    else:
        starts, ends, axes, steps = need_ints(ctx, 1), need_ints(ctx, 2), ctx.ints(3), ctx.ints(4)
    if len(starts) != len(ends):
        raise ValueError("starts and ends differ in length")
    axes = list(range(len(starts))) if axes is None else [norm_axis(int(a), x.ndim) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if len(set(axes)) != len(axes) or len(axes) != len(starts) or len(steps) != len(starts):
        raise ValueError("bad slice axes or steps")
    first, step, size = [0] * x.ndim, [1] * x.ndim, list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        first[a], size[a] = _slice_params(x.shape[a], s, e, st)
        step[a] = st
    if size == list(x.shape) and all(s == 1 for s in step):
        return x
    if 0 in size:
        return Tensor.full(size, 0, x.dtype)
    return x.slice(first, step, size)


@op("Range")
def range_op(ctx: OpContext) -> Tensor:
    start, limit, delta = (np.asarray(ctx.const(i)).reshape(()) for i in range(3))
    if delta == 0:
        raise ValueError("Range delta is 0")
    dt = array_dtype(start.dtype)
    n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    if n > MAX_RANGE:
        raise ValueError(f"Range of {n} elements is too large")
    if n > FOLD_LIMIT:  # computed by a kernel rather than stored
        step = int(delta) if dt.is_int else float(delta)
        first = int(start) if dt.is_int else float(start)
        return Tensor.iota((n,), 0, dt.compute).mul(step).add(first).cast(dt)
    if dt.is_int:
        return const_tensor((int(start) + np.arange(n, dtype=np.int64) * int(delta)).astype(dt.np), dt)
    vals = start.astype(np.float32) + np.arange(n, dtype=np.float32) * delta.astype(np.float32)
    return const_tensor(vals.astype(dt.np), dt)


@op("EyeLike")
def eye_like(ctx: OpContext) -> Tensor:
    x = need(ctx, 0)
    if x.ndim != 2:
        raise ValueError(f"EyeLike needs a 2-D input, got rank {x.ndim}")
    dtype = onnx_dtype(int(ctx.attr("dtype"))) if ctx.attr("dtype") is not None else x.dtype
    rows = Tensor.iota(x.shape, 0).add(int(ctx.attr("k", 0)))
    return rows.eq(Tensor.iota(x.shape, 1)).cast(dtype)


@op("NonZero")
def nonzero(ctx: OpContext) -> Tensor:
    """Its output shape depends on the data, so only a constant input is supported."""
    x = np.asarray(ctx.const(0))
    return const_tensor(np.array(np.nonzero(x.reshape(x.shape or (1,))), dtype=np.int64).reshape(max(x.ndim, 1), -1))


# cosine-sum windows: w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
_WINDOWS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
            "BlackmanWindow": (0.42, 0.5, 0.08)}


@op(*_WINDOWS)
def window(ctx: OpContext) -> Tensor:
    size = need_ints(ctx, 0)[0]
    if not 0 <= size <= FOLD_LIMIT:
        raise ValueError(f"window size {size} out of range")
    a0, a1, a2 = _WINDOWS[ctx.node.op_type]
    denom = size if ctx.attr("periodic", 1) else size - 1
    n = np.arange(size, dtype=np.float64)
    phase = 2 * np.pi * n / denom if denom > 0 else np.zeros(size)
    w = a0 - a1 * np.cos(phase) + a2 * np.cos(2 * phase)
    dtype = onnx_dtype(int(ctx.attr("output_datatype", 1)))
    return const_tensor(w.astype(dtype.np), dtype)
