"""The data directory's `.lock` file, as Kafka's LogManager takes it: one broker process per
data directory. Two brokers on one directory would both acknowledge writes to the same segment
files, and a restart would lose some of what they acknowledged.

flock(2) ties the lock to the open file: the kernel drops it when the process exits, however it
exits, so a crash never leaves a stale lock behind (the file itself stays, as Kafka's does).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import DataDirLockedError

LOCK_FILE = ".lock"


class DirLock:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Lock the directory (creating it if needed) or raise DataDirLockedError at once."""
        if self._fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLockedError(
                f"data directory {self.directory} is in use by another process (it holds {LOCK_FILE})") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None
