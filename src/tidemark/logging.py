"""Structured logs: one JSON object per line (or readable key=value on a terminal, where a burst
of per-offsets-partition lines is one summary line)."""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, TextIO

import structlog

# Per-partition lines that come in bursts of one per offsets partition (50 by default: the offsets
# topic is created, a broker starts or stops) and are summed up in one line per burst.
COALESCED = {"offsets_partition_loaded": "offsets_partitions_loaded",
             "offsets_partition_unloaded": "offsets_partitions_unloaded"}
SUMMED = ("records", "keys", "groups")
QUIET_AFTER_S = 1.0  # a burst nothing else follows is written this long after its last line


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    parts: list[str] = []
    for n in sorted(set(numbers)):
        if parts and parts[-1][1] == n - 1:
            parts[-1] = (parts[-1][0], n)
        else:
            parts.append((n, n))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


class Coalescer:
    """A structlog processor: a burst of COALESCED events becomes one summary line (a burst of one
    stays as it was), written before the next other line, or QUIET_AFTER_S after the burst's last."""

    def __init__(self, render: Callable[[Any, str, dict], str],
                 schedule: Callable[[float, Callable[[], None]], Any] | None = None) -> None:
        self._render = render
        self._schedule = schedule or _timer
        self._lock = threading.Lock()
        self._pending: list[dict] = []
        self._logger: Any = None
        self._generation = 0

    def __call__(self, logger: Any, method: str, event_dict: dict) -> dict:
        with self._lock:
            event = event_dict.get("event")
            if not (event in COALESCED and self._pending and self._pending[0]["event"] == event):
                self._flush_locked(logger)  # another line: the burst before it ends
            if event not in COALESCED:
                return event_dict
            self._pending.append(event_dict)
            self._logger = logger
            self._generation += 1
            generation = self._generation
        self._schedule(QUIET_AFTER_S, lambda: self._flush_if(generation))
        raise structlog.DropEvent

    def flush(self) -> None:
        with self._lock:
            self._flush_locked(self._logger)

    def _flush_if(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._flush_locked(self._logger)

    def _flush_locked(self, logger: Any) -> None:
        if not self._pending:
            return
        burst, self._pending = self._pending, []
        if len(burst) == 1:
            line = burst[0]
        else:
            line = {"event": COALESCED[burst[0]["event"]], "level": burst[0].get("level", "info"),
                    "timestamp": burst[-1].get("timestamp"), "count": len(burst),
                    "partitions": _ranges([e["partition"] for e in burst if isinstance(e.get("partition"), int)])}
            for key in SUMMED:
                if any(key in e for e in burst):
                    line[key] = sum(e.get(key) or 0 for e in burst)
            if any("seconds" in e for e in burst):
                line["seconds"] = max(e.get("seconds") or 0 for e in burst)
            line = {k: v for k, v in line.items() if v is not None}
        logger.msg(self._render(logger, "info", line))


def _timer(delay: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(delay, action)
    timer.daemon = True
    timer.start()
    return timer


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


def quiet_kazoo_chroot_warning() -> None:
    """kazoo warns (warnings.warn, a bare stderr line) when zookeeper.connect's chroot does not
    exist yet; the broker creates it (as Kafka does), so the warning only misleads."""
    warnings.filterwarnings("ignore", message="No chroot path exists", category=UserWarning)


def configure(level: str = "INFO", fmt: str = "auto") -> None:
    quiet_kazoo_chroot_warning()
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer = structlog.dev.ConsoleRenderer(colors=False) if fmt == "console" else structlog.processors.JSONRenderer()
    stream = _Stderr(sys.stderr)
    # People read the console: one line per burst. JSON keeps every partition's line (with its load
    # time), which scripts, tests and benchmarks read.
    coalesce = [Coalescer(renderer)] if fmt == "console" else []
    logging.basicConfig(level=level.upper(), stream=stream, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *coalesce,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
