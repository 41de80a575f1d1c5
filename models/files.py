"""Reading an input file with a bound: regular files only, at most a size limit, UTF-8 text."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from models.errors import InputError

MAX_INPUT_BYTES = 4 << 30          # 4 GiB: a 1M-request trace is about 50 MB


def read_text(path: Path, what: str, limit: int | None = None) -> str:
    """The file's text; InputError naming the file when it is not a readable regular file of at most
    `limit` bytes (`/dev/zero`, a FIFO or a folder never gets read) or not UTF-8."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)      # a FIFO must not block the open
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{path}: {what} is not a regular file")
            if info.st_size > limit:
                raise InputError(f"{path}: {what} is {info.st_size} bytes, more than the limit of {limit}")
            raw = fh.read(limit + 1)
    except IsADirectoryError:
        raise InputError(f"{path}: {what} is a folder, not a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise InputError(f"{path}: {what} grew past the limit of {limit} bytes while being read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: {what} is not UTF-8 text (byte {exc.start})") from None
