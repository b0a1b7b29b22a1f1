"""luminal: an autotuning compiler for ONNX models."""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "InferenceSession":
        from .runtime.session import InferenceSession

        return InferenceSession
    raise AttributeError(name)
