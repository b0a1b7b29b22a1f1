"""Host ops in numpy where onnx's reference implementation loops in Python, with the same results: handed to its
evaluator as ``new_ops`` (``host.py``), subgraphs included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_loop import Loop as ReferenceLoop
from onnx.reference.ops.op_roi_align import RoiAlign as ReferenceRoiAlign


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


class Loop(ReferenceLoop):
    """The reference's Loop with its scan outputs stacked on a new first axis as the spec says (the reference
    concatenates them: 3 iterations of [2, 4] gave [6, 4], not [3, 2, 4]); values of the enclosing scope as the
    reference reads them."""

    body: Any  # both set by the reference's constructor
    _run_body: Callable[..., list[Any]]

    def _run(self, M, cond, *carried, context=None, body=None, attributes=None, bindings=None):
        names_in = self.body.input_names
        values = dict.fromkeys(names_in) | dict(zip(names_in[2:], carried)) | dict(context or {})
        scans: list[list[np.ndarray]] = [[] for _ in range(self.K)]
        trip = None if M is None else int(np.asarray(M).reshape(-1)[0])
        go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        it = 0
        while go and (trip is None or it < trip):
            values[names_in[0]] = np.array(it, np.int64)
            values[names_in[1]] = np.array(go)
            outs = self._run_body(values, attributes=attributes, bindings=bindings)
            go = bool(np.asarray(outs[0]).reshape(-1)[0])
            carried = tuple(outs[1:1 + len(carried)])
            values.update(zip(names_in[2:], carried))
            for k, part in enumerate(outs[1 + len(carried):]):
                scans[k].append(np.asarray(part))
            it += 1
        if it == 0 and scans:  # each scan output empty, of the shape one iteration would give it
            values[names_in[0]], values[names_in[1]] = np.array(0, np.int64), np.array(True)
            once = self._run_body(values, attributes=attributes, bindings=bindings)[1 + len(carried):]
            empty = (np.zeros((0, *np.shape(part)), np.asarray(part).dtype) for part in once)
            return self._check_and_fix_outputs((*carried, *empty))
        return self._check_and_fix_outputs((*carried, *(np.stack(s) for s in scans)))


class RoiAlign(ReferenceRoiAlign):
    """The reference's RoiAlign, which takes the newest schema's default coordinate mode (half_pixel) at any opset;
    before opset 16 the op had no such attribute and mapped boxes as output_half_pixel does (onnxruntime)."""

    onnx_node: Any  # set by OpRun's constructor
    run_params: dict[str, Any]

    def _run(self, X, rois, batch_indices, coordinate_transformation_mode=None, mode=None, output_height=None,
             output_width=None, sampling_ratio=None, spatial_scale=None):
        named = any(a.name == "coordinate_transformation_mode" for a in self.onnx_node.attribute)
        if not named and (self.run_params.get("opsets") or {}).get("", 16) < 16:
            coordinate_transformation_mode = "output_half_pixel"
        return super()._run(X, rois, batch_indices, coordinate_transformation_mode, mode, output_height, output_width,
                            sampling_ratio, spatial_scale)


HOST_OPS: list[type[OpRun]] = [NonMaxSuppression, Loop, RoiAlign]
