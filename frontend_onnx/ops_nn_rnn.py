"""LSTM with a fixed sequence length, unrolled over time steps."""

from __future__ import annotations

from ..ir import Tensor
from .ops_nn_util import apply_activation, concat, fail, need, wants
from .registry import OpContext, op

_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def activations(ctx: OpContext, defaults: list[str], dirs: int):
    """Per direction, a list of callables built from activations / activation_alpha / activation_beta."""
    names = [n.decode() if isinstance(n, bytes) else n for n in (ctx.attr("activations") or [])]
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
        a = alphas.pop(0) if key in _TAKES_ALPHA and alphas else None
        b = betas.pop(0) if key in _TAKES_BETA and betas else None
        fns.append(lambda x, name=name, a=a, b=b: apply_activation(ctx, name, x, a, b))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(dirs)]


def _rows(t: Tensor, lo: int, hi: int) -> Tensor:
    """Columns [lo, hi) of the last dim."""
    return t.shrink([(0, s) for s in t.shape[:-1]] + [(lo, hi)])


def _state(ctx: OpContext, i: int, layout: int, dirs: int, batch: int, hidden: int, dtype) -> list[Tensor]:
    t = ctx.input(i)
    if t is None:
        return [Tensor.full((batch, hidden), 0, dtype)] * dirs
    if layout == 1:
        t = t.permute([1, 0, 2])
    return [t.shrink([(d, d + 1), (0, batch), (0, hidden)]).reshape((batch, hidden)).cast(dtype)
            for d in range(dirs)]


@op("LSTM")
def lstm_op(ctx: OpContext) -> list[Tensor | None]:
    x, w, r = need(ctx, 0), need(ctx, 1), need(ctx, 2)
    layout = int(ctx.attr("layout", 0))
    if layout == 1:
        x = x.permute([1, 0, 2])
    seq, batch, _ = x.shape
    direction = ctx.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        raise fail(ctx, f"unknown direction {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(ctx.attr("hidden_size", r.shape[-1]))
    if w.shape[:2] != (dirs, 4 * hidden) or r.shape != (dirs, 4 * hidden, hidden):
        raise fail(ctx, "W/R shapes do not match hidden_size and direction")
    lens = ctx.input(4)
    if lens is not None:
        v = ctx.const(4)
        if v.size and not (v == seq).all():
            raise fail(ctx, "sequence_lens shorter than the sequence are not supported")
    dt = x.dtype
    h0 = _state(ctx, 5, layout, dirs, batch, hidden, dt)
    c0 = _state(ctx, 6, layout, dirs, batch, hidden, dt)
    b, p = ctx.input(3), ctx.input(7)
    clip = ctx.attr("clip")
    input_forget = bool(ctx.attr("input_forget", 0))
    acts = activations(ctx, ["Sigmoid", "Tanh", "Tanh"], dirs)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        f, g, hact = acts[d]
        wd = w.shrink([(d, d + 1), (0, 4 * hidden), (0, w.shape[2])]).reshape(w.shape[1:]).cast(dt)
        rd = r.shrink([(d, d + 1), (0, 4 * hidden), (0, hidden)]).reshape(r.shape[1:]).cast(dt)
        # the input projection of every step at once: (seq*batch, I) @ (I, 4H)
        xw = x.reshape((seq * batch, x.shape[2])).matmul(wd.transpose()).reshape((seq, batch, 4 * hidden))
        if b is not None:
            bd = b.shrink([(d, d + 1), (0, 8 * hidden)]).reshape((8 * hidden,)).cast(dt)
            bias = _rows(bd, 0, 4 * hidden).add(_rows(bd, 4 * hidden, 8 * hidden))
            xw = xw.add(bias.reshape((1, 1, 4 * hidden)).expand(xw.shape))
        peep = None
        if p is not None:
            pd = p.shrink([(d, d + 1), (0, 3 * hidden)]).reshape((3 * hidden,)).cast(dt)
            peep = [_rows(pd, k * hidden, (k + 1) * hidden).reshape((1, hidden)).expand((batch, hidden))
                    for k in range(3)]
        rt = rd.transpose()
        h, c = h0[d], c0[d]
        steps = range(seq) if (direction == "forward" or (direction == "bidirectional" and d == 0)) \
            else range(seq - 1, -1, -1)
        out = [None] * seq
        for t in steps:
            xt = xw.shrink([(t, t + 1), (0, batch), (0, 4 * hidden)]).reshape((batch, 4 * hidden))
            gates = xt.add(h.matmul(rt))
            gi, go, gf, gc = (_rows(gates, k * hidden, (k + 1) * hidden) for k in range(4))
            if peep is not None:
                gi = gi.add(peep[0].mul(c))
                gf = gf.add(peep[2].mul(c))
            if clip is not None:
                gi, gf, gc = (_clip(v, float(clip)) for v in (gi, gf, gc))
            i_t = f(gi)
            f_t = i_t.neg().add(1) if input_forget else f(gf)
            c = f_t.mul(c).add(i_t.mul(g(gc)))
            if peep is not None:
                go = go.add(peep[1].mul(c))
            if clip is not None:
                go = _clip(go, float(clip))
            h = f(go).mul(hact(c))
            out[t] = h
        ys.append(concat([v.unsqueeze([0]) for v in out], 0))
        hs.append(h)
        cs.append(c)
    y = concat([v.unsqueeze([1]) for v in ys], 1) if wants(ctx, 0) else None
    yh = concat([v.unsqueeze([0]) for v in hs], 0) if wants(ctx, 1) else None
    yc = concat([v.unsqueeze([0]) for v in cs], 0) if wants(ctx, 2) else None
    if layout == 1:
        y = y.permute([2, 0, 1, 3]) if y is not None else None
        yh = yh.permute([1, 0, 2]) if yh is not None else None
        yc = yc.permute([1, 0, 2]) if yc is not None else None
    return [y, yh, yc]


def _clip(t: Tensor, v: float) -> Tensor:
    return t.maximum(-v).minimum(v)

