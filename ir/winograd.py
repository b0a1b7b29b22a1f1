"""Winograd F(m x m, 3 x 3) as a rewrite of a convolution's contraction into primitives.

A convolution is a SumReduce over a Mul of a window view of its input and a constant weight. Where the
window is 3 x 3 with unit steps (``o*s + k*s``: stride equal to dilation, in practice 1 and 1; a dilated window,
``o*s + k*r*s``, first splits each output axis into positions and phases, o = r*q + p, which makes it one over its
phases as images), the rewrite computes it as Lavin and Gray's Winograd convolution, each step a sum of products
with constant matrices:

    V[nu, xi, .., c, tile] = BT d B      (d: the (m+2)^2 input tiles at stride m, read through a window view;
                                          summed over a tile's rows, then its columns)
    U[nu, xi, .., c]       = G g G^T     (the weight: computed here, a constant)
    M[nu, xi, .., tile]    = sum_c U V   ((m+2)^2 GEMMs over the channels, one contraction)
    Y[.., tile, i, j]      = AT M A      (over xi, then nu; then laid out as the output rows and columns)

and Y, cropped to the output size, takes the convolution's place (a copy that fuses into Y's layout kernel when
the tiles cover the output exactly, as do a bias and an activation after it). Each sum runs over one axis at a
time: 2(m+2) products per value instead of (m+2)^2, and every load walks a contiguous axis except the input
columns' (stride m).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .dtypes import DType
from .graph import Graph, Node, Op, Src, origin, weighted_sum
from .reference import read
from .tensor import Tensor
from .view import Constraint, View, reads_dim


def _toom_cook(m: int, points: tuple[int, ...], r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(BT, G, AT) of F(m, r) from its finite interpolation points and infinity (Toom-Cook): G and AT evaluate the
    filter's and the output tile's polynomials at every point; BT's rows are the coefficients of the polynomials
    that interpolate the product from those values (the Lagrange basis over the finite points, then the points'
    own product for the leading coefficient), each scaled to integers and the same row of G divided alike."""

    def evaluate(k: int) -> list[list[Fraction]]:
        return [[Fraction(p) ** j for j in range(k)] for p in points] + [[Fraction(int(j == k - 1)) for j in range(k)]]

    def from_roots(roots: list[int]) -> list[Fraction]:  # coefficients of the product of (x - root), lowest first
        c = [Fraction(1)]
        for q in roots:
            c = [a - q * b for a, b in zip([Fraction(0), *c], [*c, Fraction(0)])]  # times (x - q)
        return c

    n = m + r - 1
    bt = [[v / math.prod(Fraction(p - q) for q in points if q != p) for v in from_roots([q for q in points if q != p])]
          for p in points] + [from_roots(list(points))]
    bt = [row + [Fraction(0)] * (n - len(row)) for row in bt]
    g = evaluate(r)
    for j, row in enumerate(bt):
        scale = math.lcm(*(v.denominator for v in row))
        bt[j], g[j] = [v * scale for v in row], [v / scale for v in g[j]]
    at = [list(col) for col in zip(*evaluate(m))]
    return np.array(bt, np.float64), np.array(g, np.float64), np.array(at, np.float64)


# the finite interpolation points per output tile size m, for a 3-tap filter (Lavin and Gray, 2016)
_POINTS = {2: (0, 1, -1), 3: (0, 1, -1, 2), 4: (0, 1, -1, 2, -2)}
_TRANSFORMS = {m: _toom_cook(m, points) for m, points in _POINTS.items()}
TILES = tuple(sorted(_TRANSFORMS))


@dataclass(frozen=True)
class _Conv:
    """The axes of a convolution's Mul (shape ``shape``): the output rows/cols and their taps, the summed
    channels, the other kept axes; x and w are the two operands (node, view)."""

    red: Node
    shape: tuple[int, ...]
    x: tuple[Node, View]
    w: tuple[Node, View]
    spatial: tuple[tuple[int, int], tuple[int, int]]  # (output axis, tap axis) for rows, then columns
    channels: tuple[int, ...]
    rest: tuple[int, ...]  # the kept axes but the two output axes (batch, group, ...), in order


def _pair(vx: View, vw: View, tap: int, kept: list[int]) -> tuple[int, int] | None:
    """(the output axis that walks the input as tap axis ``tap`` does, r) where the tap steps r whole times as far
    (1: the window's o + k; more: a dilated window), the nearest such axis, if exactly one is."""
    found = [(vx.strides[tap] // vx.strides[o], o) for o in kept
             if vx.strides[o] != 0 and not reads_dim(vw, o) and vx.strides[tap] % vx.strides[o] == 0
             and all(c[tap] == vx.strides[tap] // vx.strides[o] * c[o] for c, _, _ in vx.mask)]
    found = [(r, o) for r, o in found if r >= 1]
    if not found:
        return None
    r, o = min(found)
    return (o, r) if sum(f == r for f, _ in found) == 1 else None


def _operands(red: Node) -> tuple[Node, Src, Src, tuple[int, ...], list[int], dict[int, tuple[int, int]]] | None:
    """(the product, the activation read, the weight read, the summed axes, the kept ones, and per 3-tap axis both
    read, its ``_pair``) where ``red`` sums a float32 product of an activation and a constant weight."""
    found = weighted_sum(red) if red.dtype is DType.float32 else None
    if found is None:
        return None
    mul, (x, vx), (w, vw) = found
    axes = tuple(red.attrs["axes"])
    kept = [k for k in range(len(mul.shape)) if k not in axes]
    pairs = {t: p for t in axes if mul.shape[t] == 3 and vx.strides[t] != 0 and vw.strides[t] != 0
             and (p := _pair(vx, vw, t, kept)) is not None}
    return mul, (x, vx), (w, vw), axes, kept, pairs


def _match(red: Node) -> _Conv | None:
    found = _operands(red)
    if found is None:
        return None
    mul, (x, vx), (w, vw), axes, kept, taps = found
    pairs = sorted((o, t) for t, (o, r) in taps.items() if r == 1)
    if len(pairs) != 2 or pairs[0][0] == pairs[1][0]:
        return None
    channels = tuple(k for k in axes if k not in (pairs[0][1], pairs[1][1]))
    if not channels or any(vx.strides[k] == 0 or vw.strides[k] == 0 for k in channels):
        return None  # one input channel per output (depthwise) is no product over channels
    rest = tuple(k for k in kept if k not in (pairs[0][0], pairs[1][0]))
    return _Conv(red, mul.shape, (x, vx), (w, vw), (pairs[0], pairs[1]), channels, rest)


def _phases(red: Node) -> tuple[Node, tuple[int, ...]] | None:
    """A dilated convolution (taps ``r`` times the output's step apart along a pixel axis, r > 1) as one whose
    output axes are split into (position, phase), o = r * q + p: the phases are images of an ``o*s + k*s``
    convolution over every r-th input row (space to batch, as atrous convolutions run). Returns its SumReduce and
    the merged shape (each pair of axes as r * ceil(O / r), which a crop takes back to O); None where no axis is
    dilated so."""
    found = _operands(red)
    if found is None:
        return None
    mul, (x, vx), (w, vw), axes, _, taps = found
    split = {o: r for o, r in taps.values() if r > 1}
    if not split:
        return None
    shape: list[int] = []
    rows: dict[int, dict[int, int]] = {}
    for k, size in enumerate(mul.shape):
        rows[k] = {len(shape): split.get(k, 1)}
        if k in split:
            rows[k][len(shape) + 1] = 1
            shape += [-(-size // split[k]), split[k]]
        else:
            shape.append(size)
    new_axes = tuple(next(iter(rows[k])) for k in axes)
    phased = Node(Op.Mul, ((x, _place(vx, tuple(shape), rows)), (w, _place(vw, tuple(shape), rows))), tuple(shape),
                  DType.float32, origin=mul.origin)
    out = tuple(1 if k in new_axes else n for k, n in enumerate(shape))
    merged = tuple(-(-n // split[k]) * split[k] if k in split else n for k, n in enumerate(red.shape))
    return _node(Op.SumReduce, ((phased, View.contiguous(tuple(shape))),), out, red, new_axes), merged


def _merge(y: Node, merged: tuple[int, ...], shape: tuple[int, ...], like: Node) -> Node:
    """The phases of ``y`` back in their places, o = r * q + p (a merge of adjacent axes), cropped to ``shape``;
    read straight from what ``y`` copies where its view merges so."""
    (src, view), = y.srcs
    joined = view.reshape(merged)
    if joined is None:
        src, joined = y, View.contiguous(y.shape).reshape(merged)
        assert joined is not None
    return Node(Op.Contiguous, ((src, joined.shrink(tuple((0, n) for n in shape))),), shape, DType.float32,
                origin=like.origin)


def _conv_of(red: Node) -> tuple[_Conv, tuple[int, ...] | None] | None:
    """The convolution ``red`` ends, directly, or split into phases where it is dilated (and the merged shape)."""
    conv = _match(red)
    if conv is not None:
        return conv, None
    phased = _phases(red)
    conv = _match(phased[0]) if phased is not None else None
    return (conv, phased[1]) if conv is not None and phased is not None else None


def eligible(node: Node) -> bool:
    """Whether ``node`` is the SumReduce of a 3 x 3 convolution with a constant weight whose taps are the output's
    step apart, or a whole multiple of it (dilated: computed by phases)."""
    return _conv_of(node) is not None


# which tile an untuned compile takes: F(4x4) multiplies 4x fewer times over the channels than the direct
# contraction (F(2x2): 2.25x) and its transforms move 2.25 values per pixel and channel (F(2x2): 4), where they run
# as stencils of a 6 x 6 weight (codegen/c/stencil.py). A 3x3 conv with bias and ReLU, whole, 2 threads, AMD Zen 5,
# direct / F(2x2) / F(4x4) in ms, in rounds: at 56x56 64 -> 64 0.60 / 0.63 / 0.68, 96 1.36 / 1.37 / 1.19,
# 128 2.26 / 1.96 / 1.75, 192 5.93 / 6.44 / 4.89, 256 9.09 / 7.37 / 6.15; 64 -> 192 1.91 / 2.90 / 2.14; at 80x80 64
# 1.25 / 2.28 / 1.24, 128 4.56 / 5.86 / 2.92; at 40x40 96 0.69 / 0.64 / 0.58, 128 1.24 / 1.06 / 0.93; at 28x28
# 64 0.16 / 0.24 / 0.19, 96 0.40 / 0.50 / 0.41, 128 0.63 / 0.62 / 0.48, 256 2.38 / 1.78 / 1.26; at 20x20 128
# 0.34 / 0.34 / 0.21; at 14x14 (the tiles cover fewer pixels, whole tiles past the map's edge) 64 0.06 / 0.10 /
# 0.10, 128 0.19 / 0.22 / 0.20, 160 0.26 / 0.25 / 0.20, 192 0.39 / 0.37 / 0.33, 256 0.72 / 0.58 / 0.61; at 7x7 128
# 0.074 / 0.078 / 0.088, 192 0.146 / 0.117 / 0.127, 256 0.24 / 0.20 / 0.26. Later, on a Zen 5 host whose direct
# contraction ran at 170-190 GFLOP/s (`benchmarks/cpu_winograd.py`, 7 rounds, direct / F(4x4) in ms, one image):
# at 56x56 32 0.35 / 0.41, 48 0.68 / 0.51, 64 1.31 / 1.15, 64 -> 128 2.40 / 1.77, 64 -> 192 3.71 / 2.97; 64 at 28x28
# 0.34 / 0.27, at 80x80 2.58 / 2.47, at 112x112 5.01 / 4.55; but 64 at 56x56 over 2 images 2.63 / 2.63, 4 5.30 /
# 5.81, 8 13.3 / 13.7 (the transforms' traffic grows out of the caches), where 128 at 28x28 over 8 still took
# 10.7 / 7.6; at 14x14 64 0.11 / 0.16, 80 0.17 / 0.14, 96 0.21 / 0.17-0.19, 128 0.34 / 0.25-0.32, 160 0.54 / 0.36;
# at 7x7 direct / F(2x2) 128 0.10 / 0.09, 192 0.26 / 0.22, 256 0.38 / 0.31
# In a model the transformed weight comes from memory, not from the caches a layer timed alone keeps it in, and
# F(4x4)'s is 4x the direct one (F(2x2)'s 1.8x), where a small map's GEMM has few tiles to reuse it over: whole
# models, one process, interleaved, 2 threads, AMD Zen 2 (AVX2), F(4x4) on 14x14 maps from 96 channels against
# F(2x2) from 128 and direct below, in ms: Inception-v1 (light graph) 37.8 -> 32.1, Inception-v2 30.6 -> 27.3,
# ResNet-50 73.5 -> 69.9 and 80.8 -> 82.7 (two runs), its light graph 74.3 -> 70.9; DenseNet-121, VGG-19, AlexNet,
# ZFNet-512, SqueezeNet and DeepLab within their runs' noise (+-4%)
# Once the transforms' stencils loaded each row once for all their points and took stride-4 lanes from whole loads
# (``codegen/c/stencil.py``; the transforms of a 64-channel conv at 56x56 about half the time), F(4x4) won from
# fewer channels: one image, 2 threads, Intel Xeon (AVX-512), alone, each run after onnxruntime's, direct / F(4x4)
# in ms: at 56x56 24 0.202 / 0.190, 32 0.274 / 0.252, 40 0.428 / 0.322, 32 -> 64 0.423 / 0.369; at 80x80 24 0.341
# / 0.318, 32 0.502 / 0.413; at 112x112 24 0.713 / 0.634, 32 1.028 / 0.862, 16 0.329 / 0.389; 16 at 224x224 1.00 /
# 1.43; on smaller maps from more: at 28x28 32 0.097 / 0.106, 40 0.153 / 0.127, 48 0.176 / 0.154; at 40x40 32
# 0.212 / 0.233, 48 0.282 / 0.254. In the models (one process, paired, 20-40 rounds): DenseNet-121's light graph
# (six 128 -> 32 convs at 56x56 by F(4x4)) 1.036-1.039x, the YOLO-style detector (six) 1.009-1.010x, no other
# bundled CNN changed
F4_MIN_CHANNELS = 96  # F(4x4) on maps larger than SMALL_MAP
ONE_IMAGE_F4_MIN_CHANNELS = 40  # F(4x4) on one image's maps larger than SMALL_MAP
LARGE_MAP = 56 * 56
LARGE_MAP_F4_MIN_CHANNELS = 24  # and on one image's maps of LARGE_MAP pixels or more
# one image's dilated conv, its phases' maps larger than SMALL_MAP: with its transforms' stencils walking the tiles
# (the phases outside them), F(4x4) against directly, one process, 2 threads, Intel Xeon (AVX-512), paired: dilation
# 2, 64 channels at 112x112 1.68x, 64x64 1.25x, 32x32 1.20x, 40x40 1.02x; 80 at 40x40 1.30x; 48 at 40x40 0.74x; 32 at
# 112x112 1.06x; dilation 4, 64 at 128x128 1.16x; dilation 3, 64 at 60x60 0.93x
PHASES_F4_MIN_CHANNELS = 64
SMALL_MAP = 14 * 14
SMALL_MAP_MIN_CHANNELS = 128  # F(2x2) on maps larger than TINY_MAP, of at most SMALL_MAP pixels
TINY_MAP = 7 * 7
# On maps of at most TINY_MAP pixels, F(2x2)'s transformed weight (1.8x the direct one) streams from memory for
# 16 tiles: inside Inception-v2 (2 threads, Zen 2, each kernel's in-run span) its 7x7 convs of 192-224 channels
# ran directly 8-13% faster (192 -> 320 687 -> 600 us, 224 -> 224 534 -> 495, 192 -> 224 472 -> 427; the model
# 29.3-29.5 -> 28.6 ms), ResNet-50's 512 -> 512 15% slower (1.61-1.65 -> 1.83-1.90 ms)
TINY_MAP_MIN_CHANNELS = 256  # F(2x2) on maps of at most TINY_MAP pixels
# over an input stored channels innermost (four 3x3 convs between an exporter's Transposes, one image, 2 threads,
# one process, interleaved), Winograd against computing directly: 32 channels at 112x112 0.42x, 64 at 56x56 0.94x,
# 64 at 28x28 1.09x, 128 at 56x56 1.26x, 128 at 28x28 1.50x, 256 at 14x14 1.50x by F(2x2)
CHANNELS_INNERMOST_MIN_CHANNELS = 128
# a batch image by image from this many images, F(4x4) then from as few channels as one image's. F(4x4) image by
# image against all images at once, a conv with bias and ReLU, whole, 2 threads, Zen 5, two runs each: 64 at 56x56
# over 2 images 0.87-0.88x, 4 1.03-1.08x, 8 1.19-1.20x; 96 at 40x40 over 4 0.97-0.98x; 128 at 28x28 over 2
# 1.01-1.05x, 4 1.12-1.15x, 8 1.19-1.42x; 256 at 56x56 over 2 0.93-1.04x; 256 at 14x14 over 8 1.03-1.05x
BY_IMAGE_MIN_IMAGES = 4
# Where F(2x2) is taken (maps of at most SMALL_MAP pixels), F(3x3) is where it computes fewer products over the tiles
# computed at once (a dilated convolution's phases count as images), each value of the transformed weight (25 per pair
# of channels against F(2x2)'s 16) counted as this many tiles' products: the weight streams from memory where few tiles
# reuse it. Fitted on 2 threads, AMD Zen 4, one process, interleaved, F(3x3) / F(2x2): 512 channels at 33x33 dilation 4
# (sixteen phases of 9x9: 144 tiles of 3, 400 of 2) 0.63x, 256 at 28x28 dilation 2 (four phases of 14x14) 0.92x,
# undilated 256 at 14x14 1.07x and 512 at 7x7 1.49x
WEIGHT_READ_TILES = 30


def default_tile(red: Node) -> int:
    """The Winograd tile an untuned compile computes the convolution ending at ``red`` with, by the channels it
    sums over and writes (the fewer of the two), its output map and its images: 4 on maps larger than SMALL_MAP
    from F4_MIN_CHANNELS (from ONE_IMAGE_F4_MIN_CHANNELS for one image's maps, and for a batch's that
    ``default_by_image`` computes image by image; from LARGE_MAP_F4_MIN_CHANNELS where those maps have LARGE_MAP
    pixels or more; from PHASES_F4_MIN_CHANNELS for the phases of one image's dilated convolution); on maps larger
    than TINY_MAP 2 from SMALL_MAP_MIN_CHANNELS; on smaller maps 2 from TINY_MAP_MIN_CHANNELS, unless they are a
    dilated convolution's phases (rate 2 over 7x7: four phases of 4x4, each padded to whole tiles); 3 in place of
    2 where it costs less (``_cost``); else 0 (directly). The search tries every tile either way. Over an input
    whose channels are innermost (an NHWC value behind an exporter's Transpose) only from
    CHANNELS_INNERMOST_MIN_CHANNELS: the transforms' stencils walk its pixels at the channels' stride."""
    found = _conv_of(red)
    if found is None:
        return 0
    conv, phased = found
    (_, vx), (_, vw) = conv.x, conv.w
    col = abs(vx.strides[conv.spatial[-1][0]])
    summed = math.prod(conv.shape[k] for k in conv.channels)
    written = math.prod(conv.shape[k] for k in conv.rest if reads_dim(vw, k) and not reads_dim(vx, k))
    pixels = math.prod(conv.shape[o] for o, _ in conv.spatial)
    images = math.prod(conv.shape[k] for k in conv.rest if reads_dim(vx, k) and not reads_dim(vw, k))
    channels = min(summed, written)
    if any(0 < abs(vx.strides[k]) < col for k in conv.channels) and channels < CHANNELS_INNERMOST_MIN_CHANNELS:
        return 0
    by_image = phased is None and _many_images(conv)
    if pixels > SMALL_MAP:
        one = images == 1 or by_image
        least = (LARGE_MAP_F4_MIN_CHANNELS if pixels >= LARGE_MAP else ONE_IMAGE_F4_MIN_CHANNELS) if one \
            else PHASES_F4_MIN_CHANNELS if images == _phase_count(conv, phased) else F4_MIN_CHANNELS
        return 4 if channels >= least else 0
    enough = channels >= (SMALL_MAP_MIN_CHANNELS if pixels > TINY_MAP else TINY_MAP_MIN_CHANNELS)
    if not enough or (pixels <= TINY_MAP and phased is not None):
        return 0
    (oh, _), (ow, _) = conv.spatial
    at_once = 1 if by_image else images
    return min((2, 3), key=lambda t: _cost(t, at_once * -(-conv.shape[oh] // t) * -(-conv.shape[ow] // t)))


def _phase_count(conv: _Conv, phased: tuple[int, ...] | None) -> int:
    """How many phases a dilated convolution's output is split into (1: not dilated): each phase axis follows the
    position axis it splits (``_phases``)."""
    if phased is None:
        return 1
    return math.prod(conv.shape[o + 1] for o, _ in conv.spatial if o + 1 in conv.rest)


def _cost(tile: int, tiles: int) -> int:
    """The products F(tile x tile) computes per pair of channels over ``tiles`` tiles, its transformed weight's
    reads counted as WEIGHT_READ_TILES tiles' (``default_tile``)."""
    return (tile + 2) ** 2 * (tiles + WEIGHT_READ_TILES)


def _place(view: View, shape: tuple[int, ...], rows: dict[int, dict[int, int]],
           extra: tuple[Constraint, ...] = ()) -> View:
    """``view`` read over ``shape``: its axis j at sum(coef * new axis) for (new axis, coef) in rows[j] (0 where
    absent)."""
    full = [tuple(rows.get(j, {}).get(k, 0) for k in range(len(shape))) for j in range(view.ndim)]
    return view._affine(shape, full, [0] * view.ndim, extra)


def _const(value: np.ndarray, origin: Node) -> Node:
    arr = np.ascontiguousarray(value.astype(np.float32))
    return Node(Op.Constant, (), arr.shape, DType.float32, {"value": arr}, origin=origin.origin)


def _node(op: Op, srcs: tuple[tuple[Node, View], ...], shape: tuple[int, ...], like: Node,
          axes: tuple[int, ...] | None = None) -> Node:
    attrs = {} if axes is None else {"axes": axes}
    return Node(op, srcs, shape, DType.float32, attrs, origin=like.origin)


def _weight(conv: _Conv, g_mat: np.ndarray) -> np.ndarray:
    """U = G g G^T: shape (alpha, alpha, *rest, *channels), a rest axis the weight does not read of size 1."""
    w, vw = conv.w
    (oh, kh), (ow, kw) = conv.spatial
    value = np.ascontiguousarray(np.broadcast_to(w.attrs["value"], w.shape))
    shape = tuple(conv.shape[k] if k in (kh, kw) or reads_dim(vw, k) else 1 for k in range(len(conv.shape)))
    g = read(value, vw.shrink(tuple((0, s) for s in shape))).astype(np.float64)
    g = np.transpose(g, (*conv.rest, *conv.channels, kh, kw, oh, ow))[..., 0, 0]
    u = g_mat @ g @ g_mat.T
    return np.moveaxis(u, (-2, -1), (0, 1))


def _input_rows_cols(conv: _Conv, x: Node, tile: int, th: int, tw: int, xsizes: tuple[int, ...],
                     csizes: tuple[int, ...]) -> tuple[Node, tuple[int, ...]]:
    """V = BT d B as two sums: over each tile's rows for every column of the padded input, then over columns."""
    bt = _TRANSFORMS[tile][0]
    alpha = tile + 2
    red, shape = conv.red, conv.shape
    _, vx = conv.x
    (oh, _), (ow, _) = conv.spatial
    out_h, out_w = shape[oh], shape[ow]
    rest, chans = conv.rest, conv.channels
    nr, nc = len(rest), len(chans)
    wf = tw * tile + 2
    # T[nu, *rest, *chans, th, w] = sum_a BT[nu, a] x[.., th*tile + a, w]
    s1 = (alpha, *xsizes, *csizes, th, wf, alpha)
    p_th, p_w, p_a = 1 + nr + nc, 2 + nr + nc, 3 + nr + nc
    rows = {k: {1 + i: 1} for i, k in enumerate(rest) if reads_dim(vx, k)}
    rows |= {k: {1 + nr + i: 1} for i, k in enumerate(chans)}
    rows[oh], rows[ow] = {p_th: tile, p_a: 1}, {p_w: 1}
    n1 = len(s1)
    bounds = ((tuple(tile if k == p_th else 1 if k == p_a else 0 for k in range(n1)), 0, out_h + 2),
              (tuple(1 if k == p_w else 0 for k in range(n1)), 0, out_w + 2))
    bmat = _const(bt, red)  # read by both sums
    mul1 = _node(Op.Mul, ((x, _place(vx, s1, rows, bounds)),
                          (bmat, _place(View.contiguous(bmat.shape), s1, {0: {0: 1}, 1: {p_a: 1}}))), s1, red)
    t_shape = (*s1[:-1], 1)
    t = _node(Op.SumReduce, ((mul1, View.contiguous(s1)),), t_shape, red, (n1 - 1,))
    # V[nu, xi, *rest, *chans, th, tw] = sum_b BT[xi, b] T[nu, .., th, tw*tile + b]
    s2 = (alpha, alpha, *xsizes, *csizes, th, tw, alpha)
    n2 = len(s2)
    trows = {0: {0: 1}, p_th: {2 + nr + nc: 1}, p_w: {3 + nr + nc: tile, n2 - 1: 1}}
    trows |= {1 + i: {2 + i: 1} for i in range(nr + nc)}
    mul2 = _node(Op.Mul, ((t, _place(View.contiguous(t_shape), s2, trows)),
                          (bmat, _place(View.contiguous(bmat.shape), s2, {0: {1: 1}, 1: {n2 - 1: 1}}))), s2, red)
    v_shape = (*s2[:-1], 1)
    return _node(Op.SumReduce, ((mul2, View.contiguous(s2)),), v_shape, red, (n2 - 1,)), v_shape


def _tiles_layout(conv: _Conv, tile: int, th: int, tw: int, cols_first: bool) -> tuple[list[int], dict[int, int]]:
    """The kept axes in order with rows as (th, i) and columns as (tw, j), and where each kept axis starts; where
    ``cols_first``, the other kept axes first (a dilated convolution's phases, channels after the pixels), then the
    rows, then the columns as (j, tw): tw innermost."""
    (oh, _), (ow, _) = conv.spatial
    shape: list[int] = []
    at: dict[int, int] = {}
    for k in (*conv.rest, oh, ow) if cols_first else sorted((*conv.rest, oh, ow)):
        at[k] = len(shape)
        shape += [th, tile] if k == oh else ([tile, tw] if cols_first else [tw, tile]) if k == ow else [conv.shape[k]]
    return shape, at


def _output_rows_cols(conv: _Conv, m: Node, m_shape: tuple[int, ...], tile: int, th: int, tw: int) -> Node:
    """Y = AT M A as two sums, over xi (the tile's columns) then over nu (its rows), each load and store walking
    tw; then Y in the convolution's layout over whole tiles, (tw, j) -> tw * tile + j."""
    at = _TRANSFORMS[tile][2]
    alpha = tile + 2
    red, shape = conv.red, conv.shape
    (oh, _), (ow, _) = conv.spatial
    rest = conv.rest
    nr = len(rest)
    # Z[nu, j, *rest, th, tw] = sum_xi AT[j, xi] M[nu, xi, *rest, th, tw]
    s = (alpha, tile, *(shape[k] for k in rest), th, tw, alpha)
    n = len(s)
    mrows = {0: {0: 1}, 1: {n - 1: 1}, 2 + nr: {2 + nr: 1}, 3 + nr: {3 + nr: 1}}
    mrows |= {2 + i: {2 + i: 1} for i in range(nr)}
    amat = _const(at, red)  # read by both sums
    mul = _node(Op.Mul, ((m, _place(View.contiguous(m_shape), s, mrows)),
                         (amat, _place(View.contiguous(amat.shape), s, {0: {1: 1}, 1: {n - 1: 1}}))), s, red)
    z_shape = (*s[:-1], 1)
    z = _node(Op.SumReduce, ((mul, View.contiguous(s)),), z_shape, red, (n - 1,))
    # Y[.., th, i, .., j, tw, ..] = sum_nu AT[i, nu] Z[nu, j, .., th, tw]
    s4, ax = _tiles_layout(conv, tile, th, tw, cols_first=True)
    nu = len(s4)
    s4.append(alpha)
    zrows = {0: {nu: 1}, 1: {ax[ow]: 1}, 2 + nr: {ax[oh]: 1}, 3 + nr: {ax[ow] + 1: 1}}
    zrows |= {2 + i: {ax[k]: 1} for i, k in enumerate(rest)}
    mul4 = _node(Op.Mul, ((z, _place(View.contiguous(z_shape), tuple(s4), zrows)),
                          (amat, _place(View.contiguous(amat.shape), tuple(s4), {0: {ax[oh] + 1: 1}, 1: {nu: 1}}))),
                 tuple(s4), red)
    y_shape = (*s4[:-1], 1)
    y = _node(Op.SumReduce, ((mul4, View.contiguous(tuple(s4))),), y_shape, red, (nu,))
    layout, at_axis = _tiles_layout(conv, tile, th, tw, cols_first=False)
    yrows = {ax[k]: {at_axis[k]: 1} for k in rest}
    yrows |= {ax[oh]: {at_axis[oh]: 1}, ax[oh] + 1: {at_axis[oh] + 1: 1}, ax[ow]: {at_axis[ow] + 1: 1},
              ax[ow] + 1: {at_axis[ow]: 1}}
    return _node(Op.Contiguous, ((y, _place(View.contiguous(y_shape), tuple(layout), yrows)),), tuple(layout), red)


def _winograd(conv: _Conv, x: Node, tile: int, u: Node) -> Node:
    """The nodes that compute ``conv`` (its input read from ``x``, its transformed weight ``u``) by Winograd
    F(tile x tile, 3 x 3); the last has the convolution's shape."""
    alpha = tile + 2
    red, shape = conv.red, conv.shape
    _, vx = conv.x
    _, vw = conv.w
    (oh, _), (ow, _) = conv.spatial
    th, tw = math.ceil(shape[oh] / tile), math.ceil(shape[ow] / tile)
    rest, chans = conv.rest, conv.channels
    nr, nc = len(rest), len(chans)
    # the input's own kept axes: the rest it reads (batch, group), else size 1
    xsizes = tuple(shape[k] if reads_dim(vx, k) else 1 for k in rest)
    csizes = tuple(shape[k] for k in chans)
    v, v_shape = _input_rows_cols(conv, x, tile, th, tw, xsizes, csizes)

    # M = sum_c U V: Mul over (nu, xi, *rest, th, tw, *chans), summed over chans
    s2 = (alpha, alpha, *(shape[k] for k in rest), th, tw, *csizes)
    urows = {0: {0: 1}, 1: {1: 1}}
    urows |= {2 + i: {2 + i: 1} for i, k in enumerate(rest) if reads_dim(vw, k)}
    urows |= {2 + nr + i: {4 + nr + i: 1} for i in range(nc)}
    vrows = {0: {0: 1}, 1: {1: 1}, 2 + nr + nc: {2 + nr: 1}, 3 + nr + nc: {3 + nr: 1}}
    vrows |= {2 + i: {2 + i: 1} for i, k in enumerate(rest) if reads_dim(vx, k)}
    vrows |= {2 + nr + i: {4 + nr + i: 1} for i in range(nc)}
    mul = _node(Op.Mul, ((u, _place(View.contiguous(u.shape), s2, urows)),
                         (v, _place(View.contiguous(v_shape), s2, vrows))), s2, red)
    m_shape = s2[:4 + nr] + (1,) * nc
    m = _node(Op.SumReduce, ((mul, View.contiguous(s2)),), m_shape, red, tuple(range(4 + nr, 4 + nr + nc)))

    y = _output_rows_cols(conv, m, m_shape, tile, th, tw)
    # the convolution's shape (summed axes as 1s) cropped from Y (a copy that fuses into Y's kernel when exact)
    kept = sorted((*rest, oh, ow))
    padded = tuple(th * tile if k == oh else tw * tile if k == ow else shape[k] for k in kept)
    out = tuple(shape[k] if k in kept else 1 for k in range(len(shape)))
    crop = _place(View.contiguous(padded), out, {i: {k: 1} for i, k in enumerate(kept)})
    return _node(Op.Contiguous, ((y, crop),), out, red)


def _image_axis(conv: _Conv) -> int | None:
    """The axis of a batch's images where ``conv`` runs over more than one: the outermost kept axis, which the
    input reads and the weight does not."""
    (_, vx), (_, vw) = conv.x, conv.w
    first = min((*conv.rest, *(o for o, _ in conv.spatial)))
    if first in conv.rest and conv.shape[first] > 1 and reads_dim(vx, first) and not reads_dim(vw, first):
        return first
    return None


def _by_images(conv: _Conv, x: Node, tile: int, u: Node) -> Node:
    """``conv`` by Winograd over its batch image by image: each image's transforms and products are one image's
    size, which the caches hold where a batch's outgrow them; the images' outputs are concatenated along the batch
    (a sum of zero-padded parts, as the frontend's Concat), each written in place (``runtime.alias``). The images'
    kernels differ only in the window of the input they read, so they are one kernel (``codegen.window``)."""
    b = _image_axis(conv)
    assert b is not None
    one = tuple(1 if k == b else s for k, s in enumerate(conv.shape))
    parts = []
    for i in range(conv.shape[b]):
        at = tuple((i, i + 1) if k == b else (0, s) for k, s in enumerate(conv.shape))
        image = dataclasses.replace(conv, shape=one, x=(conv.x[0], conv.x[1].shrink(at)),
                                    w=(conv.w[0], conv.w[1].shrink(at)))
        parts.append(Tensor(_winograd(image, x, tile, u)))
    with origin(*conv.red.origin) if conv.red.origin else contextlib.nullcontext():
        return Tensor.cat(parts, b).node


def by_images(node: Node) -> bool:
    """Whether ``node`` ends a convolution Winograd may take over a batch image by image (one not dilated, over
    more than one image)."""
    conv = _match(node)
    return conv is not None and _image_axis(conv) is not None


def default_by_image(red: Node) -> bool:
    """Whether an untuned compile that computes the convolution ending at ``red`` by Winograd does so image by
    image: over BY_IMAGE_MIN_IMAGES images or more."""
    conv = _match(red)
    return conv is not None and _many_images(conv)


def _many_images(conv: _Conv) -> bool:
    b = _image_axis(conv)
    return b is not None and conv.shape[b] >= BY_IMAGE_MIN_IMAGES


def rewrite(graph: Graph, chosen: dict[int, int], images: Collection[int] = ()) -> tuple[Graph, dict[int, Node]]:
    """``graph`` with the convolutions whose SumReduce node ids are in ``chosen`` computed by Winograd (their tile
    size as the value; ineligible ones stay), those in ``images`` one image at a time where they run over a batch;
    also the node each old node id became (a convolution's: its last new node; nodes only they read are gone)."""
    order = graph.toposort()
    rewritten = {n.id: c for n in order if n.id in chosen and (c := _conv_of(n)) is not None}
    if not rewritten:
        return graph, {n.id: n for n in order}
    new: dict[int, Node] = {}
    for n in order:
        found = rewritten.get(n.id)
        if found is not None:
            conv, merged = found
            x, tile = new[conv.x[0].id], chosen[n.id]
            u = _const(_weight(conv, _TRANSFORMS[tile][1]), n)
            if merged is not None:
                new[n.id] = _merge(_winograd(conv, x, tile, u), merged, n.shape, n)
            elif n.id in images and _image_axis(conv) is not None:
                new[n.id] = _by_images(conv, x, tile, u)
            else:
                new[n.id] = _winograd(conv, x, tile, u)
            continue
        srcs = tuple((new[s.id], v) for s, v in n.srcs)
        same = all(a is b for (a, _), (b, _) in zip(srcs, n.srcs))
        new[n.id] = n if same else Node(n.op, srcs, n.shape, n.dtype, n.attrs, origin=n.origin)
    out = Graph(graph.inputs, [new[o.id] for o in graph.outputs], graph.output_names, graph.bindings,
                graph.declared)
    alive = {n.id for n in out.toposort()}
    return out, {k: v for k, v in new.items() if v.id in alive}
