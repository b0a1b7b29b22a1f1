"""Views: every movement agrees with numpy on the same data."""

import numpy as np
import pytest

from luminal.ir import DType, Graph, Tensor
from luminal.ir.reference import read, run
from luminal.ir.view import View, extent

rng = np.random.default_rng(0)


def _data(shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def test_permute_expand_slice():
    x = _data((2, 3, 4))
    v = View.contiguous(x.shape).permute((2, 0, 1))
    np.testing.assert_array_equal(read(x, v), x.transpose(2, 0, 1))
    v = View.contiguous((3, 1)).expand((3, 5))
    np.testing.assert_array_equal(read(_data((3, 1)), v), np.broadcast_to(_data((3, 1)), (3, 5)))
    v = View.contiguous(x.shape).slice((1, 2, 3), (1, -1, -2), (1, 3, 2))
    np.testing.assert_array_equal(read(x, v), x[1:2, 2::-1, 3::-2])


@pytest.mark.parametrize("pads", [((1, 2), (0, 3)), ((0, 0), (2, 0)), ((-1, 1), (1, -2))])
def test_pad_matches_numpy(pads):
    x = _data((3, 4))
    v = View.contiguous(x.shape).pad(pads)
    crop = x[max(0, -pads[0][0]):3 - max(0, -pads[0][1]), max(0, -pads[1][0]):4 - max(0, -pads[1][1])]
    expect = np.pad(crop, [(max(0, a), max(0, b)) for a, b in pads])
    np.testing.assert_array_equal(read(x, v), expect)


def test_window_is_a_sliding_window_over_padding():
    x = _data((7,))
    v = View.contiguous(x.shape).pad(((1, 1),)).window(0, 4, 3, stride=2, dilation=1)
    xp = np.pad(x, (1, 1))
    expect = np.stack([xp[o * 2:o * 2 + 3] for o in range(4)])
    np.testing.assert_array_equal(read(x, v), expect)


@pytest.mark.parametrize("shape,new", [((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((6, 4), (2, 3, 2, 2)),
                                       ((2, 3, 4), (24,)), ((1, 6, 1), (2, 3))])
def test_reshape_of_permuted(shape, new):
    """A reshape is a view when it can be, else the Tensor layer copies; both agree with numpy."""
    x = _data(shape)
    order = tuple(reversed(range(len(shape))))
    expect = x.transpose(order).reshape(new)
    r = View.contiguous(shape).permute(order).reshape(new)
    if r is not None:
        np.testing.assert_array_equal(read(x, r), expect)
    t = Tensor.input("x", shape, DType.float32)
    y = t.permute(order).reshape(new)
    (out,) = run(Graph([t.node], [y.contiguous().node], ["y"]), {"x": x})
    np.testing.assert_array_equal(out, expect)


def test_reshape_that_needs_a_copy_returns_none():
    v = View.contiguous((4, 6)).permute((1, 0))
    assert v.reshape((24,)) is None
    padded = View.contiguous((2, 3)).pad(((0, 0), (1, 0)))
    assert padded.reshape((8,)) is None


def test_split_keeps_mask():
    x = _data((4,))
    v = View.contiguous((4,)).pad(((1, 1),))
    r = v.reshape((2, 3))
    assert r is None or np.array_equal(read(x, r), np.pad(x, (1, 1)).reshape(2, 3))
    v2 = View.contiguous((2, 3)).pad(((0, 0), (1, 0)))
    r2 = v2.reshape((2, 2, 2))
    np.testing.assert_array_equal(read(_data((2, 3)), r2), np.pad(_data((2, 3)), ((0, 0), (1, 0))).reshape(2, 2, 2))


def test_extent_is_bounded_by_the_masks_of_the_combinations_it_is_a_multiple_of():
    """Image 1 of a (2, 3, 4, 5) buffer read through a 3x3 window padded by 1: masks aside, the window's first row
    and column reach into image 0; the pad's masks (on o + k, rows read at stride 5) keep it inside image 1."""
    v = View.contiguous((2, 3, 4, 5)).pad(((0, 0), (0, 0), (1, 1), (1, 1)))
    v = v.window(2, 4, 3).window(4, 5, 3).shrink(((1, 2), (0, 3), (0, 4), (0, 3), (0, 5), (0, 3)))
    lo, hi = extent(v, v.strides)
    assert (v.offset + lo, v.offset + hi) == (60, 119)
    # the box alone reaches a row and a column further both ways
    box = sum(min(0, c * (s - 1)) for c, s in zip(v.strides, v.shape))
    assert v.offset + box == 60 - 6
    # a combination that is no whole multiple of the masked one is bounded by the box
    assert extent(v, (0, 0, 1, 2, 0, 0)) == (0, 3 + 2 * 2)
