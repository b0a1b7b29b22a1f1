"""Buffer planning, launch plan, CompiledModel, InferenceSession, artifacts."""

from .artifact import load_artifact, write_artifact
from .compile import compile_graph, compile_model
from .model import CompiledModel
from .report import kernel_table
from .session import InferenceSession

__all__ = ["CompiledModel", "InferenceSession", "compile_graph", "compile_model", "kernel_table", "load_artifact",
           "write_artifact"]
