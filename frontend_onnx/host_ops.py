"""Host ops in numpy where onnx's reference implementation loops in Python, with the same results: handed to its
evaluator as ``new_ops`` (``host.py``), subgraphs included."""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun


class NonMaxSuppression(OpRun):
    """The reference's greedy selection per batch and class (candidates above the score threshold, by score, the
    lower index first among equal scores; a candidate kept unless its IoU with a box kept before exceeds the
    threshold; at most ``max_output_boxes_per_class``), each kept box suppressing the candidates after it at once
    (SSDlite's 20 classes of 3234 boxes: 1.7 s in the reference, milliseconds here)."""

    def _run(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None,
             center_point_box=None):
        limit = _first(max_output_boxes_per_class, 0)
        iou = _first(iou_threshold, np.float32(0))
        thr = _first(score_threshold, None)
        lo_x, hi_x, lo_y, hi_y = _extents(boxes, int(center_point_box or 0))
        area = (hi_x - lo_x) * (hi_y - lo_y)
        picked: list[tuple[int, int, int]] = []
        for b in range(boxes.shape[0]):
            for c in range(scores.shape[1]):
                s = scores[b, c]
                cand = np.arange(s.shape[0]) if thr is None else np.nonzero(s > thr)[0]
                order = cand[np.lexsort((cand, -s[cand]))]
                # the candidates' extents and areas in score order, compacted as boxes are suppressed
                rest = [order, lo_x[b, order], hi_x[b, order], lo_y[b, order], hi_y[b, order], area[b, order]]
                kept = 0
                with np.errstate(divide="ignore", invalid="ignore"):
                    while rest[0].size and kept < max(int(limit), 0):
                        picked.append((b, c, int(rest[0][0])))
                        kept += 1
                        head, rest = [r[0] for r in rest], [r[1:] for r in rest]
                        alive = ~_suppressed(head, rest, iou)
                        rest = [r[alive] for r in rest]
        return (np.array(picked, np.int64).reshape(-1, 3),)


def _first(v, default):
    return v.reshape(-1)[0] if v is not None and np.asarray(v).size else default


def _extents(boxes: np.ndarray, center: int) -> tuple[np.ndarray, ...]:
    """Each box's x and y extents, [batch, box]: corners (y1, x1, y2, x2) in either order, or centre and size."""
    if center:
        hw, hh = boxes[..., 2] / 2, boxes[..., 3] / 2
        return boxes[..., 0] - hw, boxes[..., 0] + hw, boxes[..., 1] - hh, boxes[..., 1] + hh
    y = np.sort(boxes[..., [0, 2]], axis=-1)
    x = np.sort(boxes[..., [1, 3]], axis=-1)
    return x[..., 0], x[..., 1], y[..., 0], y[..., 1]


def _suppressed(head: list, rest: list[np.ndarray], iou) -> np.ndarray:
    """Which of the boxes ``rest`` the kept box ``head`` suppresses, as the reference decides it (each its index,
    x and y extents and area): no overlap (or an empty box) never does; else intersection over union above
    ``iou``, the union summed in the reference's order."""
    _, lx, hx, ly, hy, a = head
    _, rlx, rhx, rly, rhy, ra = rest
    ix = np.minimum(hx, rhx) - np.maximum(lx, rlx)
    iy = np.minimum(hy, rhy) - np.maximum(ly, rly)
    inter = ix * iy
    union = ra + a - inter
    return (ix > 0) & (iy > 0) & (inter > 0) & (ra > 0) & (a > 0) & (union > 0) & (inter / union > iou)


HOST_OPS: list[type[OpRun]] = [NonMaxSuppression]
