"""The one exception type users see: a clear one-line message, exit code 2."""


from pathlib import Path


class LuminalError(Exception):
    """Bad input or usage. The CLI prints ``error: <message>`` and exits with 2."""

    exit_code = 2


def require_file(path: str | Path, what: str) -> Path:
    """``path`` when it is a file; else the one wording every command uses: "<what> 'p' not found", or, for a
    folder, what it is (a compiled artifact, or a folder) instead of "not found"."""
    p = Path(path)
    if p.is_file():
        return p
    if (p / "manifest.json").is_file():
        raise LuminalError(f"{what} {str(path)!r} is an artifact folder (compile -o), not a file: check, bench and "
                           f"InferenceSession load it; compile takes the ONNX model it came from")
    if p.is_dir():
        raise LuminalError(f"{what} {str(path)!r} is a folder, not a file")
    raise LuminalError(f"{what} {str(path)!r} not found")
