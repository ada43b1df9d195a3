"""Reading a topic's segment files straight from a data directory, without opening a `Log`.

For tools (`tidemark offsets dump`, the Spark offsets-log reader): nothing here recovers,
truncates, locks or writes, so it is safe on the data directory of a running broker (segments
are append-only; a batch still being written shows up as a torn tail, which ends the read).
Only `<base offset>.log` files are read: segments in the middle of a clean (`.cleaned`,
`.swap`, `.deleted`) are the broker's business.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from tidemark.records import (
    BatchHeader,
    RecordsError,
    decode_records,
    iter_batches,
    iter_timestamped_key_values,
)

from .segment import LOG_SUFFIX

Warn = Callable[[str], None]


def _ignore(_message: str) -> None:
    pass


def topic_partition_dirs(data_dir: Path, topic: str) -> list[tuple[int, Path]]:
    """(partition, directory) of every `<topic>-<partition>` directory in data_dir, by partition."""
    pattern = re.compile(re.escape(topic) + r"-(\d+)")
    found = []
    for path in Path(data_dir).iterdir():
        match = pattern.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def segment_files(log_dir: Path) -> list[Path]:
    """The `.log` segment files of one partition directory, in base offset order."""
    segments = [path for path in Path(log_dir).iterdir()
                if path.suffix == LOG_SUFFIX and path.stem.isdigit() and path.is_file()]
    return sorted(segments, key=lambda path: int(path.stem))


def iter_segment_batches(data: bytes, *, warn: Warn = _ignore, label: str = "segment",
                         decode: Callable[[bytes, int], list] = decode_records) -> Iterator[tuple[BatchHeader, list]]:
    """Each complete batch of one segment file's bytes with its records, as `decode(data,
    position)` returns them (default: full `Record`s, headers included).

    A batch whose records cannot be decoded is skipped with a warning; the read stops at the
    first incomplete batch (a torn tail), warning how many bytes it left. `label` names the
    segment in the warnings.
    """
    end = 0
    for pos, header in iter_batches(data, validate=False):
        end = pos + header.size
        try:
            records = decode(data, pos)
        except RecordsError as exc:
            warn(f"{label}: batch at offset {header.base_offset} skipped: {exc}")
            continue
        yield header, records
    if end < len(data):
        warn(f"{label}: {len(data) - end} bytes after the last complete batch ignored")


def _timestamped_key_values(data: bytes, position: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return list(iter_timestamped_key_values(data, position))


def iter_log_records(log_dir: Path, *, warn: Warn = _ignore) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every data record of one partition directory, in
    offset order; control batches are skipped, and so are headers."""
    for segment in segment_files(log_dir):
        label = f"{Path(log_dir).name}/{segment.name}"
        for header, records in iter_segment_batches(segment.read_bytes(), warn=warn, label=label,
                                                    decode=_timestamped_key_values):
            if not header.is_control:
                yield from records


def log_end_offset(log_dir: Path) -> int:
    """The offset after the last complete batch of a partition directory (its base offset for
    an empty last segment, 0 for a directory without segments)."""
    segments = segment_files(log_dir)
    if not segments:
        return 0
    last = segments[-1]
    end = int(last.stem)
    for _pos, header in iter_batches(last.read_bytes(), validate=False):
        end = max(end, header.next_offset)
    return end


__all__ = ["iter_log_records", "iter_segment_batches", "log_end_offset", "segment_files", "topic_partition_dirs"]
