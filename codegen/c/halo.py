"""A conv's input read in place from a copy with its padding made real (a halo) and its strides split into phases,
by a GEMM whose rows are its output pixels.

A convolution's A operand, read through windows over a padded input, is an affine view with mask constraints
(the padding). Copied once per call into a buffer that holds the zeros of the padding (the input's masked axes
widened), the view has no mask. The copy also splits each pixel axis by the step the output walks it with
(``space to depth``: input row ``ih = s * q + p`` lies at phase p, position q), its phases outside and its
positions innermost: output pixel (oh, ow) then reads ``oh * R + ow`` plus a term of its window tap and channel
alone, R the copy's row pitch, whatever the strides. Over "wide" rows of R pixels (the R - OW past each output
row land in tile rows the epilogue skips) the GEMM's rows are consecutive addresses, and the micro-kernel
broadcasts MR neighbouring values per K row against vectors of a weight packed once: no im2col, and rows of any
length share tiles (as onnxruntime's NCHWc and XNNPACK's direct convolutions, on the plain layout). A batch's
images are rows too: the copy holds their axis next to the pixels, each image's wide rows after the last one's.
Where whole tiles of MR rows cover an output row in fewer rows than R (``panels``: a 7x7 map's 9-pixel wide rows
in tiles of 7), each output row starts a tile instead, and a tile's rows past the output row are not stored.
The copy is the input's size (plus padding); im2col writes it K / channels times. Where the input's rows are its
innermost axis, the tiles may read the input itself instead (``in_place``, the schedule's ``copy`` off): MR pixels of
an output row at the column stride apart, a tile whose windows cross the padding taking its K rows one by one, in
place, as zeros, or copied between zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from ..kernel import Kernel

MAX_WASTE = 1.3  # wide rows at most this much longer than the output rows (a 3x3 conv with pads 1: (W + 2) / W)
TILE_ROWS = (12, 10, 8, 7)  # the MRs a default tile over the copy takes (``schedule._halo_rows``)
# the longest output row a tile over a padded copy takes whole (``schedule._halo_rows``): 13 and 14 pixels, in two
# vectors' 26 and 28 accumulators. 2 threads, hot, paired, against 7-row tiles: 3x3 64 -> 256 at 13x13 1.06-1.09x,
# 48 -> 192 1.07x, 5x5 24 -> 64 and 32 -> 128 at 13x13 1.07x, 3x3 128 -> 32 at 14x14 1.05-1.06x; two such tiles a
# row lost to 12-row tiles across wide rows (3x3 128 -> 128 at 28x28 0.96x, 64 -> 128 at 56x56 0.99x), and 9-row
# ones at 27x27 (0.97x)
ROW_TILE_MAX = 14


@dataclass(frozen=True)
class Halo:
    """The copy of A's input, padded and split by phase, and how A's K and batch dims address it."""

    source: tuple[int, ...]  # the input's shape
    padded: tuple[int, ...]  # per axis, the input's extent with the padding's zeros
    before: tuple[int, ...]  # per axis, the zeros before the input's first element
    split: tuple[int, ...]  # per axis, the step the output pixels walk it with (1: not a pixel axis)
    pixels: tuple[int, ...]  # the pixel axes, outer first (one or two)
    walks: tuple[tuple[int, int, int], ...]  # per moving K or batch dim: (dim, axis, coefficient)
    offset: tuple[int, ...]  # per axis, the index of pixel 0 at K index 0, padding included
    pitch: int  # R: the copy's stride along the outer pixel axis (the wide row), or the row itself
    width: int  # the output row's length (OW): columns of a wide row that are outputs
    rows: int  # output rows (OH; 1 where the pixels are one dim)
    # a batch of images as rows too: the axis their dim walks (moved next to the pixels in the copy, each image
    # ``span`` wide rows apart: the outer pixel axis's positions) and their count; -1 and 1 without
    image: int = -1
    images: int = 1
    span: int = 0
    # the GEMM's rows per wide row: ``pitch``, or the output row in whole tiles of a schedule's rows where that is
    # fewer (``panels``)
    cols: int = 0

    @property
    def wide(self) -> int:
        """The GEMM's rows: ``rows`` wide rows of ``cols`` columns (per image ``span`` of them)."""
        return self.images * self.span * self.cols if self.image >= 0 else self.rows * self.cols

    @cached_property
    def layout(self) -> tuple[tuple[int, str, int], ...]:
        """The copy's dims, outer first, as (axis, kind, extent): every axis whole ("a") or, for a pixel axis,
        its phases ("p") in place and its positions ("q") innermost, in the pixel axes' order."""
        outer = [(x, "p" if x in self.pixels else "a", self.split[x] if x in self.pixels else self.padded[x])
                 for x in range(len(self.source)) if x != self.image]
        image = [(self.image, "a", self.padded[self.image])] if self.image >= 0 else []
        return (*outer, *image, *((x, "q", -(-self.padded[x] // self.split[x])) for x in self.pixels))

    @cached_property
    def strides(self) -> dict[tuple[int, str], int]:
        dims = self.layout
        return {(x, kind): math.prod(e for _, _, e in dims[i + 1:]) for i, (x, kind, _) in enumerate(dims)}

    @property
    def numel(self) -> int:
        return math.prod(e for _, _, e in self.layout)


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[x + 1:]) for x in range(len(shape)))


def _walks(strides: tuple[int, ...], moving: list[int], source: tuple[int, ...]
           ) -> tuple[dict[int, int], dict[int, int]] | None:
    """Per moving dim, the input axis it walks (the coarsest whose stride divides its own) and its step there."""
    alpha = row_major(source)
    axis: dict[int, int] = {}
    coef: dict[int, int] = {}
    for d in moving:
        s = strides[d]
        walks = [x for x in range(len(source)) if source[x] > 1 and s > 0 and s % alpha[x] == 0]
        if not walks:
            return None
        axis[d] = max(walks, key=lambda x: alpha[x])
        coef[d] = s // alpha[axis[d]]
    return axis, coef


def _offsets(view, full: tuple[int, ...], source: tuple[int, ...], axis: dict[int, int], coef: dict[int, int],
             moving: list[int]) -> tuple[list[int], dict[int, tuple[int, ...]]] | None:
    """Per axis the index at dims 0 (the view's offset split over the axes), and the masked axes' coefficients:
    each mask must bound one axis by its extent, with every dim walking that axis in it."""
    alpha = row_major(source)
    off = [0] * len(source)
    masked: dict[int, tuple[int, ...]] = {}
    for co, lo, hi in view.mask:
        dims = [d for d in range(len(full)) if co[d] and full[d] != 1]
        axes = {axis.get(d) for d in dims}
        if len(axes) != 1 or None in axes or any(co[d] != coef[d] for d in dims):
            return None
        (x,) = axes
        if x is None or x in masked or hi - lo != source[x]:
            return None
        masked[x], off[x] = co, -lo
    if any(axis[d] in masked and not masked[axis[d]][d] for d in moving):
        return None  # a dim walks a padded axis outside its mask
    rest = view.offset - sum(off[x] * alpha[x] for x in masked)
    for x in range(len(source)):  # the other axes' offsets, coarsest first
        if x not in masked:
            off[x], rest = divmod(rest, alpha[x])
    return (off, masked) if not rest else None


def plan_halo(kernel: Kernel, a: int, m: tuple[int, ...], k: tuple[int, ...], batch: tuple[int, ...]) -> Halo | None:
    """The copy A (op ``a``) can be read in place from, with rows ``m`` as wide rows, or None: every dim that moves
    A walks one axis of its (contiguous) input with a positive step, each mask bounds one axis by its extent (the
    padding), each row dim walks an axis of its own, batch dims walk no pixel axis, some K dim walks a row dim's
    axis (a window, which a 7 x 1 kernel has along the rows only), and the wide rows are at most MAX_WASTE times
    the output rows, as they are or in whole tiles of ``tile_rows`` (``least_cols``)."""
    op = kernel.ops[a]
    view, full = op.attr("view"), kernel.full
    source = kernel.inputs[op.attr("buf")].shape
    moving = [d for d in range(len(full)) if full[d] != 1 and view.strides[d]]
    walked = _walks(view.strides, moving, source)
    if walked is None:
        return None
    axis, coef = walked
    found = _offsets(view, full, source, axis, coef, moving)
    if found is None:
        return None
    off, masked = found
    rows_dims = [d for d in m if full[d] != 1]
    if not rows_dims or len(rows_dims) > 3 or any(d not in axis for d in rows_dims):
        return None
    # a leading row dim no other dim walks the axis of, with unit steps and no padding: images of a batch
    image_dim = rows_dims[0] if len(rows_dims) > 1 and coef[rows_dims[0]] == 1 and axis[rows_dims[0]] not in masked \
        and not any(axis[d] == axis[rows_dims[0]] for d in moving if d != rows_dims[0]) else None
    if image_dim is not None:
        rows_dims = rows_dims[1:]
    if len(rows_dims) > 2:
        return None
    pixels = tuple(axis[d] for d in rows_dims)
    if len(set(pixels)) != len(pixels) or list(pixels) != sorted(pixels):
        return None
    if not any(d in axis and axis[d] in pixels for d in k) or any(axis.get(d) in pixels for d in batch):
        return None
    image = axis[image_dim] if image_dim is not None else -1
    if image >= 0 and image > pixels[0]:
        return None
    before, padded = [0] * len(source), list(source)
    for x in range(len(source)):
        hi_i = off[x] + sum(coef[d] * (full[d] - 1) for d in moving if axis[d] == x)
        if x in masked:
            before[x] = max(0, -off[x])
            padded[x] = source[x] + before[x] + max(0, hi_i - (source[x] - 1))
        elif off[x] < 0 or hi_i >= source[x]:
            return None
    split = [1] * len(source)
    for d in rows_dims:
        split[axis[d]] = coef[d]
    width = full[rows_dims[-1]]
    rows = full[rows_dims[0]] if len(rows_dims) == 2 else 1
    images = full[image_dim] if image_dim is not None else 1
    h = Halo(source, tuple(padded), tuple(before), tuple(split), pixels,
             tuple((d, axis[d], coef[d]) for d in (*k, *batch) if d in axis),
             tuple(o + b for o, b in zip(off, before)), 0, width, rows, image, images)  # pitch, span: from its strides
    strides = h.strides
    pitch = strides[(pixels[0], "q")] if len(pixels) == 2 else width
    span = strides[(image, "a")] // pitch if image >= 0 else 0  # wide rows per image: the copy's positions
    if image >= 0 and len(pixels) == 1:  # one wide row per image, the copy's positions
        pitch, span = strides[(image, "a")], 1
    # longer wide rows where whole tiles of an output row compute none past it (``panels``: a 5x5 conv at 7x7, 11)
    if pitch < width or least_cols(width, pitch) > MAX_WASTE * width or (
            image >= 0 and span > MAX_WASTE * rows):
        return None
    return replace(h, pitch=pitch, span=span, cols=pitch)


def address(h: Halo, index: dict[int, str]) -> str:
    """C expression of the copy's element that pixel 0 reads at the K and batch indices ``index`` (dim: C
    expression; absent dims at 0)."""
    strides = h.strides
    parts = []
    for x in range(len(h.source)):
        v = _index(h, x, index, padded=True)
        if x in h.pixels:
            s = h.split[x]
            parts += [f"(({v}) % {s})*{strides[(x, 'p')]}", f"(({v}) / {s})*{strides[(x, 'q')]}"] if s > 1 \
                else [f"({v})*{strides[(x, 'q')]}"]
        else:
            parts.append(f"({v})*{strides[(x, 'a')]}")
    return " + ".join(parts)


def reach(h: Halo, full: tuple[int, ...]) -> int:
    """One past the farthest element a K row of pixel 0 reads (every index at its largest)."""
    strides, far = h.strides, 0
    for x in range(len(h.source)):
        v = h.offset[x] + sum(c * (full[d] - 1) for d, ax, c in h.walks if ax == x)
        if x in h.pixels:
            s = h.split[x]
            far += (s - 1) * strides[(x, "p")] * (s > 1) + v // s * strides[(x, "q")]
        else:
            far += v * strides[(x, "a")]
    return far + 1


def tile_rows(width: int) -> tuple[int, ...]:
    """The MRs a default tile over the copy may take for output rows of ``width`` pixels: TILE_ROWS, and the row
    itself where one tile holds it (ROW_TILE_MAX)."""
    return (*TILE_ROWS, width) if TILE_ROWS[0] < width <= ROW_TILE_MAX else TILE_ROWS


def _whole(width: int, mr: int) -> int:
    """An output row of ``width`` pixels in whole tiles of ``mr`` rows."""
    return -(-width // mr) * mr


def least_cols(width: int, pitch: int) -> int:
    """The fewest GEMM rows an output row of ``width`` pixels takes over wide rows of ``pitch``: a wide row, or
    whole tiles of one of ``tile_rows`` (``panels``)."""
    return min(pitch, *(_whole(width, r) for r in tile_rows(width)))


def panels(h: Halo, mr: int) -> Halo:
    """``h`` with each output row in whole tiles of ``mr`` rows where those are fewer than the wide row's ``pitch``
    columns: a tile then starts each output row and the next one's rows start at the next wide row, so that the
    ``pitch - width`` columns past a row are computed only as far as its last tile reaches (a 7x7 map's 63 wide
    pixels in tiles of 7 are its 49 pixels)."""
    cols = _whole(h.width, mr)
    return replace(h, cols=cols) if cols < h.pitch else h


def whole_tiles(h: Halo, mr: int) -> Halo:
    """``h`` with each output row in whole tiles of ``mr`` rows whatever the wide row: the input read in place
    (``in_place``) has no wide rows, and a tile must not cross an output row."""
    return replace(h, cols=_whole(h.width, mr))


def row_address(h: Halo, row: str) -> str:
    """C expression of the copy's element at GEMM row ``row`` (a tile's first: within one wide row's ``cols``)."""
    return row if h.cols == h.pitch else f"(({row}) / {h.cols}) * {h.pitch} + ({row}) % {h.cols}"


def halo_size(h: Halo, full: tuple[int, ...], mr: int) -> int:
    """Floats of the copy: the padded, split input, and zeros past it up to what the last tile's rows read."""
    last = -(-h.wide // mr) * mr - 1
    return max(h.numel, reach(h, full) + last // h.cols * h.pitch + last % h.cols)


def across(h: Halo) -> int:
    """The copy's whole axis that is the input's innermost (a channels-last input's channels), which the copy then
    transposes in blocks; -1 where the innermost is the copied rows' own pixel axis (the copy reads rows in place)
    or is padded (each row then tests its own channel)."""
    x = len(h.source) - 1
    whole = h.before[x] == 0 and h.padded[x] == h.source[x] > 1
    return x if x not in h.pixels and x != h.image and whole else -1


def pairs(h: Halo) -> bool:
    """Whether the copy's rows are read at stride 2 along the input's innermost axis, so that a vector of a row is
    the even elements of two vectors of the input (``lum_even``; float32 only, which the caller decides)."""
    x = h.layout[-1][0]
    return across(h) < 0 and h.split[x] == 2 and row_major(h.source)[x] == 1


def emit_halo_copy(h: Halo, buf: int, dst: str, size: int, vw: int, evens: bool = False) -> list[str]:
    """Statements (inside a parallel region) filling ``dst`` with input ``buf`` between the zeros of its padding,
    split by phase, then zeros up to ``size``; each loop ends in a barrier. Over a channels-last input (``across``)
    each loop step copies ``vw`` channels' rows by one transposition (``lum_tr``) of the input's contiguous pixels,
    where a row of its own read each element a cache line from the last. With ``evens`` (``pairs``), a row at
    stride 2 takes a vector from each two of the input (``lum_even``) where the two lie in the input: the
    compiler's loop took each row's last part an element at a time (its last pair of vectors reads one element
    past the row, which may lie past the input's end)."""
    dims = h.layout
    alpha = row_major(h.source)
    *outer, (wx, _, wq) = dims
    cx = across(h)
    steps = [(x, kind, -(-e // vw) if x == cx else e) for x, kind, e in outer]
    # a step of the parallel loop copies the rows of one block of the outer dims: every position of the outer pixel
    # axis and every phase of the inner one (a row each, looped inside), so that its index arithmetic, a few
    # divisions and tests, is shared by them
    looped = {*([(h.pixels[0], "q")] if len(h.pixels) == 2 else []), *([(wx, "p")] if h.split[wx] > 1 else [])}
    inner = [] if cx >= 0 else [(x, kind, e) for x, kind, e in steps if (x, kind) in looped]
    steps = [st for st in steps if st not in inner]
    L = ["#pragma omp for schedule(static)",
         f"for (int64_t r = 0; r < {math.prod(e for _, _, e in steps)}LL; r++) {{",
         "    int64_t q = r; (void)q;"]
    ix = {}
    for x, kind, e in reversed(steps):
        L.append(f"    const int64_t {kind}{x} = q % {e}{f' * {vw}' if x == cx else ''}; q /= {e}; (void){kind}{x};")
        ix[(x, kind)] = f"{kind}{x}"
    for x, kind, e in inner:
        L.append(f"    for (int64_t {kind}{x} = 0; {kind}{x} < {e}; {kind}{x}++) {{")
        ix[(x, kind)] = f"{kind}{x}"
    L.append("    int ok = 1;")
    at_row = " + ".join(f"{kind}{x} * {h.strides[(x, kind)]}" for x, kind, _ in outer) or "0"
    L.append(f"    lum_t *restrict d = {dst} + {at_row};")
    if cx >= 0:
        rows = h.strides[(cx, "a")]
        L.append(f"    const int64_t nc = lum_min64({vw}, {h.source[cx]} - a{cx});")
    src = []
    for x in range(len(h.source)):
        if x == wx:
            continue
        v = f"a{x}" if (x, "a") in ix else f"(p{x} + {h.split[x]} * q{x})" if h.split[x] > 1 else f"q{x}"
        if x != cx:
            L.append(f"    {{ const int64_t u = {v} - {h.before[x]}; ok &= (uint64_t)u < {h.source[x]}ULL; }}")
        src.append(f"({v} - {h.before[x]}) * {alpha[x]}")
    s, b, n = h.split[wx], h.before[wx], h.source[wx]
    phase = f"p{wx}" if s > 1 else "0"
    lo = f"lum_max64(0, ({b} - {phase} + {s - 1}) / {s})"
    hi = f"lum_min64({wq}, ({n} + {b} - {phase} + {s - 1}) / {s})"
    if cx >= 0:
        # position w of channel c's row holds input column phase + s*w - before, where that lies in [0, n)
        L += ["    if (!ok) {",
              f"        for (int64_t c = 0; c < nc; c++) for (int64_t w = 0; w < {wq}; w++) d[c * {rows} + w] = 0;",
              "        continue;",
              "    }",
              f"    const lum_t *restrict x = in{buf} + {' + '.join(src) or '0'};",
              f"    const int64_t lo = {lo}, hi = {hi};",
              "    for (int64_t c = 0; c < nc; c++) {",
              f"        for (int64_t w = 0; w < lo; w++) d[c * {rows} + w] = 0;",
              f"        for (int64_t w = lum_max64(lo, hi); w < {wq}; w++) d[c * {rows} + w] = 0;",
              "    }",
              f"    if (hi > lo) lum_tr(x + ({phase} + {s} * lo - {b}) * {alpha[wx]}, {s * alpha[wx]}, hi - lo, nc,",
              f"                         d + lo, {rows});"]
    else:
        at = f"{phase} + {s} * w - {b}"
        at = f"({at}) * {alpha[wx]}" if alpha[wx] != 1 else at  # the input's pixels apart, its innermost axis of one
        L += [f"    if (!ok) {{ for (int64_t w = 0; w < {wq}; w++) d[w] = 0; continue; }}",
              f"    const lum_t *restrict x = in{buf} + {' + '.join(src) or '0'};",
              f"    const int64_t lo = {lo};",
              f"    const int64_t hi = {hi};",
              "    for (int64_t w = 0; w < lo; w++) d[w] = 0;"]
        if evens:  # the vectors from element phase - before + 2 w of the row, while 2 w < end (they lie in the input)
            end = f"{math.prod(h.source) - 2 * vw + 1} - (x - in{buf}) - {phase} + {b}"
            L += ["    {",
                  "    int64_t w = lo;",
                  f"    for (; w + {vw} <= hi && 2 * w < {end}; w += {vw})",
                  f"        *(lum_vu *)(d + w) = lum_even(x + {phase} - {b} + 2 * w);",
                  f"    for (; w < hi; w++) d[w] = x[{at}];",
                  "    }"]
        else:
            L += ["    #pragma omp simd",
                  f"    for (int64_t w = lo; w < hi; w++) d[w] = x[{at}];"]
        L.append(f"    for (int64_t w = lum_max64(lo, hi); w < {wq}; w++) d[w] = 0;")
    L += ["    }"] * len(inner)
    L += ["}",
          "#pragma omp for schedule(static)",
          f"for (int64_t w = {h.numel}; w < {size}; w++) {dst}[w] = 0;"]
    return L


def emit_halo_table(h: Halo, full: tuple[int, ...], k: tuple[int, ...], name: str) -> tuple[list[str], int]:
    """Fill statements of ``name``: per flattened K index, the copy's element pixel 0 reads (batch dims at 0);
    and the table's length."""
    from .emit import unravel

    size = math.prod(full[d] for d in k)
    idx = dict(zip(k, unravel("x", tuple(full[d] for d in k))))
    return [f"int64_t *{name} = lum_ti; lum_ti += {size};",
            f"for (int64_t x = 0; x < {size}; x++) {name}[x] = {address(h, idx)};"], size


def batch_term(h: Halo, batch: tuple[int, ...], full: tuple[int, ...], ib: str, in_input: bool = False) -> str:
    """C expression of the copy's offset for batch index ``ib``, or (``in_input``) the input's (batch dims walk no
    pixel axis: linear)."""
    from .emit import unravel

    stride = row_major(h.source) if in_input else [h.strides.get((x, "a"), 0) for x in range(len(h.source))]
    parts = [f"{c * stride[ax]}*({e})" for d, e in zip(batch, unravel(ib, tuple(full[x] for x in batch)))
             for dd, ax, c in h.walks if dd == d]
    return " + ".join(parts) or "0"


def in_place(h: Halo) -> bool:
    """Whether a tile may read A from the input itself (``emit_in_place_tables``): one image, two pixel axes, the
    inner one the input's innermost (rows contiguous), no other axis padded."""
    inner = len(h.source) - 1
    return (h.image < 0 and len(h.pixels) == 2 and h.pixels[1] == inner
            and all(h.padded[x] == h.source[x] for x in range(len(h.source)) if x not in h.pixels))


def _first(h: Halo, x: int, padded: bool = False) -> int:
    """The input's index along axis ``x`` that output pixel 0 reads at K index 0 (negative in the padding), or
    (``padded``) the copy's, its padding counted."""
    return h.offset[x] - (0 if padded else h.before[x])


def _index(h: Halo, x: int, index: dict[int, str], padded: bool = False) -> str:
    """C expression of ``_first`` at the K and batch indices ``index`` (absent dims at 0)."""
    return " + ".join([str(_first(h, x, padded)),
                       *(f"{c}*{index[d]}" for d, ax, c in h.walks if ax == x and d in index)])


def index_range(h: Halo, x: int, full: tuple[int, ...]) -> tuple[int, int]:
    """The least and greatest index along axis ``x`` that output pixel 0 reads over every K index."""
    lo = _first(h, x)
    return lo, lo + sum(c * (full[d] - 1) for d, ax, c in h.walks if ax == x)


def taps(h: Halo, k: tuple[int, ...]) -> tuple[int, ...]:
    """The K dims that walk a pixel axis (a conv's kernel rows and columns): the row and column a K index reads
    depend on these alone."""
    return tuple(d for d in k if any(dd == d and ax in h.pixels for dd, ax, _ in h.walks))


def tap_count(h: Halo, full: tuple[int, ...], k: tuple[int, ...]) -> int:
    """How many taps (``taps``) the K dims ``k`` of extents ``full`` hold: the length of the per-tap tables."""
    return math.prod(full[d] for d in taps(h, k))


def emit_in_place_tables(h: Halo, full: tuple[int, ...], k: tuple[int, ...]) -> tuple[list[str], int]:
    """Fill statements of the in-place tables: per flattened K index ``ta_k`` the input's element that output pixel
    0 reads (batch dims at 0; negative in the padding) and ``tp_k`` its tap (the flattened index of ``taps``); per
    tap ``th_t`` and ``tw_t`` the row and column pixel 0 reads; their length."""
    from .emit import unravel

    size = math.prod(full[d] for d in k)
    walk = taps(h, k)
    extents = tuple(full[d] for d in walk)
    idx = dict(zip(k, unravel("x", tuple(full[d] for d in k))))
    tap = dict(zip(walk, unravel("y", extents)))
    alpha = row_major(h.source)
    flat = " + ".join(f"({_index(h, x, idx)})*{alpha[x]}" for x in range(len(h.source)))
    tap_of = " + ".join(f"{c}*{idx[d]}" for d, c in zip(walk, row_major(extents))) or "0"
    ntap = tap_count(h, full, k)
    rows, cols = h.pixels
    return [f"int64_t *ta_k = lum_ti; lum_ti += {size};",
            f"int64_t *tp_k = lum_ti; lum_ti += {size};",
            f"int64_t *th_t = lum_ti; lum_ti += {ntap};",
            f"int64_t *tw_t = lum_ti; lum_ti += {ntap};",
            f"for (int64_t x = 0; x < {size}; x++) {{",
            f"    ta_k[x] = {flat};",
            f"    tp_k[x] = {tap_of};",
            "}",
            f"for (int64_t y = 0; y < {ntap}; y++) {{",
            f"    th_t[y] = {_index(h, rows, tap)};",
            f"    tw_t[y] = {_index(h, cols, tap)};",
            "}"], 2 * size + 2 * ntap

