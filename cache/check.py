"""Look at a cache file's bytes before SQLite opens it, so a foreign or damaged file is refused untouched."""

from __future__ import annotations

import stat
from pathlib import Path

from ..errors import LuminalError

SQLITE_MAGIC = b"SQLite format 3\x00"


def check_header(path: Path) -> None:
    """Raise LuminalError when ``path`` is not an intact SQLite file. Empty files pass: they become new caches."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # before any open: a FIFO blocks it forever
            raise LuminalError(f"tuning cache {path} is not a regular file")
        size = st.st_size
        if size == 0:
            return
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise LuminalError(f"cannot read tuning cache {path}: {e.strerror or e}") from None
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise LuminalError(f"{path} is not a luminal tuning cache (not a SQLite database)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise LuminalError(f"tuning cache {path} is corrupted (bad page size in its header)")
    change_counter = int.from_bytes(head[24:28], "big")
    n_pages = int.from_bytes(head[28:32], "big")
    valid_for = int.from_bytes(head[92:96], "big")
    wal = Path(f"{path}-wal")
    # with a live write-ahead log the main file may lag its header mid-checkpoint; SQLite recovers that itself
    wal_live = wal.exists() and wal.stat().st_size > 0
    if not wal_live and n_pages and valid_for == change_counter and size < n_pages * page_size:
        raise LuminalError(
            f"tuning cache {path} is truncated ({size} of {n_pages * page_size} bytes); delete it or restore a copy"
        )
