"""Triton code generation: emitter, schedule space, backends "cuda" and "interpret", AOT compile."""
