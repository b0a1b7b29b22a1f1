"""The primitive IR: graph, ops, dtypes, views, passes and the reference executor."""

from .dtypes import DType
from .graph import Graph, Node, Op
from .passes import optimize
from .printer import format_graph
from .reference import run as run_reference
from .tensor import Tensor, broadcast_shape
from .view import View

__all__ = ["DType", "Graph", "Node", "Op", "Tensor", "View", "broadcast_shape", "format_graph",
           "optimize", "run_reference"]
