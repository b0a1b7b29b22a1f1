"""The ai.onnx.ml ops that are plain tensor arithmetic: Binarizer, ArrayFeatureExtractor, TreeEnsemble."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import reduce

import numpy as np

from ..ir import DType, Tensor
from .ops_nn_index import gather_axis
from .ops_shape import stack
from .registry import OpContext, fail, need, op

ML = "ai.onnx.ml"


@op("Binarizer", domain=ML)
def binarizer(ctx: OpContext) -> Tensor:
    """1 where x exceeds the threshold, else 0, in x's type."""
    x = need(ctx, 0)
    return x.gt(float(ctx.attr("threshold", 0.0))).cast(x.dtype)


@op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(ctx: OpContext) -> Tensor:
    """The entries of the last axis that the indices name; a 1-D input gives one row."""
    x, idx = need(ctx, 0), need(ctx, 1)
    if x.ndim == 0:
        raise fail(ctx, "needs an input of rank 1 or more")
    if x.ndim == 1:
        x = x.reshape((1, x.shape[0]))
    return gather_axis(x, idx.reshape((idx.numel,)), x.ndim - 1)


# TreeEnsemble's node modes: BRANCH_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER
_COMPARE: dict[int, Callable[[Tensor, float], Tensor]] = {
    0: Tensor.le, 1: Tensor.lt, 2: Tensor.ge, 3: Tensor.gt, 4: Tensor.eq,
    5: lambda x, s: x.eq(s).logical_not()}
_MEMBER = 6


class _Trees:
    """A TreeEnsemble's attributes, walked as its reference walks them: each tree from its root, true branch
    first (set-membership nodes take their members from one list, in that order)."""

    def __init__(self, ctx: OpContext, x: Tensor) -> None:
        a = {k: np.asarray(ctx.attr(k)) for k in ("nodes_modes", "nodes_featureids", "nodes_truenodeids",
                                                    "nodes_falsenodeids", "nodes_trueleafs", "nodes_falseleafs",
                                                    "leaf_weights", "leaf_targetids", "tree_roots")}
        self.a = a
        self.splits = np.asarray(ctx.attr("nodes_splits", np.zeros(len(a["nodes_modes"]))), np.float64)
        self.tracks = np.asarray(ctx.attr("nodes_missing_value_tracks_true") or [0] * len(a["nodes_modes"]))
        self.members = iter(np.asarray(ctx.attr("membership_values", np.zeros(0)), np.float64).tolist())
        self.x = x

    def column(self, f: int) -> Tensor:
        n = self.x.shape[0]
        return self.x.shrink([(0, n), (f, f + 1)]).reshape((n,))

    def condition(self, i: int) -> Tensor:
        col, mode = self.column(int(self.a["nodes_featureids"][i])), int(self.a["nodes_modes"][i])
        if mode == _MEMBER:
            members = list(itertools.takewhile(lambda m: not math.isnan(m), self.members))
            cond = reduce(Tensor.__or__, (col.eq(m) for m in members)) if members else col.lt(col)
        else:
            cond = _COMPARE[mode](col, float(self.splits[i]))
        if self.tracks[i]:  # NaN takes the true branch: it compares below no bound and above none
            cond = cond | col.isnan()
        return cond

    def leaves(self, i: int, leaf: bool, reach: Tensor) -> list[tuple[int, Tensor]]:
        """(leaf, whether a row reaches it) under node or leaf i, reached where ``reach`` holds."""
        if leaf:
            return [(i, reach)]
        cond = self.condition(i)
        a = self.a
        true = self.leaves(int(a["nodes_truenodeids"][i]), bool(a["nodes_trueleafs"][i]), reach & cond)
        return true + self.leaves(int(a["nodes_falsenodeids"][i]), bool(a["nodes_falseleafs"][i]),
                                  reach & cond.logical_not())

    def root(self, r: int) -> bool:
        a = self.a
        return bool(a["nodes_trueleafs"][r] and a["nodes_falseleafs"][r]
                    and a["nodes_truenodeids"][r] == a["nodes_falsenodeids"][r])


@op("TreeEnsemble", domain=ML)
def tree_ensemble(ctx: OpContext) -> Tensor:
    """Every leaf weighted by whether a row's path reaches it (the conjunction of the comparisons on the way),
    summed per target (SUM; AVERAGE over the trees)."""
    x = need(ctx, 0)
    if x.ndim != 2 or not x.dtype.is_float:
        raise fail(ctx, f"needs a float input of shape (N, F), got {x.dtype.name} {list(x.shape)}")
    aggregate, post = int(ctx.attr("aggregate_function", 1)), int(ctx.attr("post_transform", 0))
    if aggregate not in (0, 1) or post != 0:
        raise fail(ctx, f"aggregate_function {aggregate}, post_transform {post}: only SUM or AVERAGE without a "
                        "post transform")
    trees = _Trees(ctx, x)
    n, targets = x.shape[0], int(ctx.attr("n_targets", 1))
    everywhere = Tensor.full((n,), True, DType.bool)
    reached: list[tuple[int, Tensor]] = []
    roots = [int(r) for r in trees.a["tree_roots"]]
    for r in roots:
        if trees.root(r):
            reached.append((int(trees.a["nodes_truenodeids"][r]), everywhere))
        else:
            reached += trees.leaves(r, False, everywhere)
    scale = 1.0 / len(roots) if aggregate == 0 else 1.0
    columns = []
    for t in range(targets):
        terms = [mask.cast(x.dtype).mul(float(trees.a["leaf_weights"][leaf]) * scale) for leaf, mask in reached
                 if int(trees.a["leaf_targetids"][leaf]) == t]
        columns.append(reduce(Tensor.add, terms) if terms else Tensor.full((n,), 0.0, x.dtype))
    return stack(columns, 1)
