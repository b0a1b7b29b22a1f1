"""The one exception type users see: a clear one-line message, exit code 2."""


class LuminalError(Exception):
    """Bad input or usage. The CLI prints ``error: <message>`` and exits with 2."""

    exit_code = 2
