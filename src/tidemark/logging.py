"""Structured logs: one JSON object per line (or readable key=value on a terminal)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


class _Stderr:
    """stderr that outlives its reader: `tidemark serve 2>&1 | tee log` and Ctrl-C stops tee too,
    and a shutdown that failed on its first log line would leave the data unclean. Once the pipe
    is gone the lines are dropped."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._closed = False

    def write(self, text: str) -> int:
        if not self._closed:
            try:
                return self._stream.write(text)
            except (BrokenPipeError, ValueError):  # ValueError: the stream was closed
                self._closed = True
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                self._closed = True


def configure(level: str = "INFO", fmt: str = "auto") -> None:
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer = structlog.dev.ConsoleRenderer(colors=False) if fmt == "console" else structlog.processors.JSONRenderer()
    stream = _Stderr(sys.stderr)
    logging.basicConfig(level=level.upper(), stream=stream, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
