"""Recurrent ops (LSTM, GRU, RNN) with a fixed sequence length, unrolled over time steps.

The input projection of all steps is one matmul per direction; each step adds
one recurrent matmul and the gate arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import DType, Tensor
from .ops_elementwise import ACTIVATIONS
from .ops_shape import stack
from .registry import OpContext, fail, need, op, wants

_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def activations(ctx: OpContext, defaults: list[str], dirs: int):
    """Per direction, a list of callables built from activations / activation_alpha / activation_beta."""
    names = list(ctx.attr("activations") or [])
    if not names:
        names = defaults * dirs
    if len(names) == len(defaults):
        names = names * dirs
    if len(names) != len(defaults) * dirs:
        raise fail(ctx, f"expected {len(defaults) * dirs} activations, got {len(names)}")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    fns = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise fail(ctx, f"unsupported activation {key!r}")
        a = alphas.pop(0) if key in _TAKES_ALPHA and alphas else None
        b = betas.pop(0) if key in _TAKES_BETA and betas else None
        fns.append(lambda x, key=key, a=a, b=b: ACTIVATIONS[key](x, a, b))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(dirs)]


def _cols(t: Tensor, lo: int, hi: int) -> Tensor:
    """Columns [lo, hi) of the last dim."""
    return t.shrink([(0, s) for s in t.shape[:-1]] + [(lo, hi)])


def _clip(t: Tensor, v: float | None) -> Tensor:
    return t if v is None else t.maximum(-v).minimum(v)


@dataclass
class _Rnn:
    x: Tensor  # (seq, batch, input), layout 0
    seq: int
    batch: int
    hidden: int
    dirs: int
    direction: str
    layout: int
    dtype: DType
    clip: float | None
    lens: Tensor | None  # (batch,) int64 sequence lengths, where some may be shorter than seq


def _setup(ctx: OpContext, gates: int) -> _Rnn:
    x, w, r = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    if x.ndim != 3:
        raise fail(ctx, "X must be 3-D")
    layout = int(ctx.attr("layout", 0))
    if layout == 1:
        x = x.permute([1, 0, 2])
    seq, batch, _ = x.shape
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise fail(ctx, f"unknown direction {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(ctx.attr("hidden_size", r.shape[-1]))
    if w.shape != (dirs, gates * hidden, x.shape[2]) or r.shape != (dirs, gates * hidden, hidden):
        raise fail(ctx, "W/R shapes do not match hidden_size, direction and the input size")
    lens = ctx.input(4)
    if lens is not None and lens.numel:
        if lens.shape != (batch,):
            raise fail(ctx, f"sequence_lens must be {batch} lengths in [0, {seq}]")
        lens = lens.cast(DType.int64)
        if lens.is_const:
            v = lens.numpy()
            if (v < 0).any() or (v > seq).any():
                raise fail(ctx, f"sequence_lens must be {batch} lengths in [0, {seq}]")
            if (v == seq).all():
                lens = None
        else:  # known when the model runs: lengths past [0, seq] are taken as the nearest bound
            lens = lens.maximum(0).minimum(seq)
    else:
        lens = None
    clip = ctx.attr("clip")
    return _Rnn(x, seq, batch, hidden, dirs, direction, layout, x.dtype, None if clip is None else float(clip), lens)


def _state(ctx: OpContext, i: int, s: _Rnn) -> list[Tensor]:
    t = ctx.input(i)
    if t is None:
        return [Tensor.full((s.batch, s.hidden), 0, s.dtype)] * s.dirs
    if s.layout == 1:
        t = t.permute([1, 0, 2])
    return [t.shrink([(d, d + 1), (0, s.batch), (0, s.hidden)]).reshape((s.batch, s.hidden)).cast(s.dtype)
            for d in range(s.dirs)]


def _direction(ctx: OpContext, s: _Rnn, d: int, gates: int, recurrent_bias_cols: int):
    """(x @ W^T + biases for every step as (seq, batch, G*H), R^T, the recurrent bias columns left out)."""
    w, r, b = need(ctx, 1), need(ctx, 2), ctx.input(3)
    gh = gates * s.hidden
    wd = w.shrink([(d, d + 1), (0, gh), (0, w.shape[2])]).reshape((gh, w.shape[2])).cast(s.dtype)
    rd = r.shrink([(d, d + 1), (0, gh), (0, s.hidden)]).reshape((gh, s.hidden)).cast(s.dtype)
    xw = s.x.reshape((s.seq * s.batch, s.x.shape[2])).matmul(wd.transpose()).reshape((s.seq, s.batch, gh))
    rest = None
    if b is not None:
        bd = b.shrink([(d, d + 1), (0, 2 * gh)]).reshape((2 * gh,)).cast(s.dtype)
        wb, rb = _cols(bd, 0, gh), _cols(bd, gh, 2 * gh)
        # recurrent bias columns past ``recurrent_bias_cols`` stay with the recurrent term (GRU)
        if recurrent_bias_cols < gh:
            rest = _cols(rb, recurrent_bias_cols, gh).reshape((1, gh - recurrent_bias_cols))
            rb = _cols(rb, 0, recurrent_bias_cols).pad([(0, gh - recurrent_bias_cols)])
        xw = xw.add(wb.add(rb).reshape((1, 1, gh)).expand(xw.shape))
    return xw, rd.transpose(), rest


def _time_order(s: _Rnn, d: int, xw: Tensor) -> tuple[Tensor, range, Tensor | None]:
    """(step inputs, the order to visit them, the (seq, batch) time index that puts outputs back).

    With uneven sequence lengths a reverse direction walks each sequence from its own last
    element: the inputs are gathered into that order first and the outputs gathered back."""
    forward = s.direction == "forward" or (s.direction == "bidirectional" and d == 0)
    if s.lens is None:
        return xw, (range(s.seq) if forward else range(s.seq - 1, -1, -1)), None
    if forward:
        return xw, range(s.seq), None
    t = Tensor.const(np.arange(s.seq).reshape(s.seq, 1), DType.int64).expand((s.seq, s.batch))
    lens = s.lens.reshape((1, s.batch)).expand((s.seq, s.batch))
    idx = t.lt(lens).where(lens.sub(1).sub(t), t)
    return _time_gather(xw, idx), range(s.seq), idx


def _time_gather(t: Tensor, idx: Tensor) -> Tensor:
    return t.gather(idx.reshape((*idx.shape, 1)).expand(t.shape), 0)


def _valid(s: _Rnn, t: int) -> Tensor | None:
    """(batch, 1) mask of the sequences still running at step t; None when all are."""
    if s.lens is None:
        return None
    return s.lens.gt(t).reshape((s.batch, 1))


def _final(s: _Rnn, state: Tensor) -> Tensor:
    """A final state; an empty sequence reports zeros (as onnxruntime does), not the initial state."""
    if s.lens is None or (s.lens.is_const and s.lens.numpy().all()):
        return state
    ran = s.lens.gt(0).reshape((s.batch, 1)).expand(state.shape)
    return ran.where(state, Tensor.full(state.shape, 0, state.dtype))


def _hold(valid: Tensor | None, new: Tensor, old: Tensor) -> Tensor:
    return new if valid is None else valid.expand(new.shape).where(new, old)


def _step_input(xw: Tensor, t: int) -> Tensor:
    _, batch, gh = xw.shape
    return xw.shrink([(t, t + 1), (0, batch), (0, gh)]).reshape((batch, gh))


def _outputs(ctx: OpContext, s: _Rnn, ys: list[list[Tensor]], finals: list[list[Tensor]],
             orders: list[Tensor | None]) -> list[Tensor | None]:
    """Y (seq, dirs, batch, H) and each final state (dirs, batch, H), in the node's layout."""
    y = None
    if wants(ctx, 0):
        per_dir = [stack(out, 0) for out in ys]
        per_dir = [v if idx is None else _time_gather(v, idx) for v, idx in zip(per_dir, orders)]
        y = stack(per_dir, 1)
        if s.layout == 1:
            y = y.permute([2, 0, 1, 3])
    outs: list[Tensor | None] = [y]
    for k, states in enumerate(finals, start=1):
        if not wants(ctx, k):
            outs.append(None)
            continue
        t = stack(states, 0)
        outs.append(t.permute([1, 0, 2]) if s.layout == 1 else t)
    return outs


def _run(ctx: OpContext, s: _Rnn, inits: list[list[Tensor]], direction) -> list[Tensor | None]:
    """Unroll every direction. ``direction(d)`` gives (the step inputs, ``step``), where
    ``step(x_t, states)`` returns the new states, h first; ``inits`` holds each state's initial
    value per direction. A sequence past its length keeps its states and outputs zeros."""
    ys: list[list[Tensor]] = []
    finals: list[list[Tensor]] = [[] for _ in inits]
    orders = []
    for d in range(s.dirs):
        xw, step = direction(d)
        xw, steps, order = _time_order(s, d, xw)
        states = [init[d] for init in inits]
        out: dict[int, Tensor] = {}
        for t in steps:
            new = step(_step_input(xw, t), states)
            valid = _valid(s, t)
            states = [_hold(valid, n, old) for n, old in zip(new, states)]
            out[t] = _hold(valid, new[0], Tensor.full(new[0].shape, 0, new[0].dtype))
        ys.append([out[t] for t in range(s.seq)])
        orders.append(order)
        for k, v in enumerate(states):
            finals[k].append(_final(s, v))
    return _outputs(ctx, s, ys, finals, orders)


@op("LSTM")
def lstm_op(ctx: OpContext) -> list[Tensor | None]:
    s = _setup(ctx, 4)
    hid, dt = s.hidden, s.dtype
    p = ctx.input(7)
    input_forget = bool(ctx.attr("input_forget", 0))
    acts = activations(ctx, ["Sigmoid", "Tanh", "Tanh"], s.dirs)

    def direction(d: int):
        f, g, hact = acts[d]
        xw, rt, _ = _direction(ctx, s, d, 4, 4 * hid)
        peep = None
        if p is not None:
            pd = p.shrink([(d, d + 1), (0, 3 * hid)]).reshape((3 * hid,)).cast(dt)
            peep = [_cols(pd, k * hid, (k + 1) * hid).reshape((1, hid)).expand((s.batch, hid)) for k in range(3)]

        def step(xt: Tensor, states: list[Tensor]) -> list[Tensor]:
            h, c = states
            gates = xt.add(h.matmul(rt))
            gi, go, gf, gc = (_cols(gates, k * hid, (k + 1) * hid) for k in range(4))
            if peep is not None:
                gi = gi.add(peep[0].mul(c))
                gf = gf.add(peep[2].mul(c))
            i_t = f(_clip(gi, s.clip))
            f_t = i_t.neg().add(1) if input_forget else f(_clip(gf, s.clip))
            c_new = f_t.mul(c).add(i_t.mul(g(_clip(gc, s.clip))))
            if peep is not None:
                go = go.add(peep[1].mul(c_new))
            return [f(_clip(go, s.clip)).mul(hact(c_new)), c_new]

        return xw, step

    return _run(ctx, s, [_state(ctx, 5, s), _state(ctx, 6, s)], direction)


@op("GRU")
def gru_op(ctx: OpContext) -> list[Tensor | None]:
    s = _setup(ctx, 3)
    hid = s.hidden
    linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
    acts = activations(ctx, ["Sigmoid", "Tanh"], s.dirs)

    def direction(d: int):
        f, g = acts[d]
        xw, rt, rbh = _direction(ctx, s, d, 3, 2 * hid)
        rzr, rh = _cols(rt, 0, 2 * hid), _cols(rt, 2 * hid, 3 * hid)

        def step(xt: Tensor, states: list[Tensor]) -> list[Tensor]:
            (h,) = states
            zr = _cols(xt, 0, 2 * hid).add(h.matmul(rzr))
            z = f(_clip(_cols(zr, 0, hid), s.clip))
            r = f(_clip(_cols(zr, hid, 2 * hid), s.clip))
            rec = h.matmul(rh) if linear_before_reset else r.mul(h).matmul(rh)
            if rbh is not None:
                rec = rec.add(rbh.expand(rec.shape))
            pre = _cols(xt, 2 * hid, 3 * hid).add(r.mul(rec) if linear_before_reset else rec)
            hh = g(_clip(pre, s.clip))
            return [z.neg().add(1).mul(hh).add(z.mul(h))]

        return xw, step

    return _run(ctx, s, [_state(ctx, 5, s)], direction)


@op("RNN")
def rnn_op(ctx: OpContext) -> list[Tensor | None]:
    s = _setup(ctx, 1)
    acts = activations(ctx, ["Tanh"], s.dirs)

    def direction(d: int):
        (f,) = acts[d]
        xw, rt, _ = _direction(ctx, s, d, 1, s.hidden)
        return xw, lambda xt, states: [f(_clip(xt.add(states[0].matmul(rt)), s.clip))]

    return _run(ctx, s, [_state(ctx, 5, s)], direction)
