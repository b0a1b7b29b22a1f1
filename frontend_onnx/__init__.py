"""frontend_onnx stage."""
