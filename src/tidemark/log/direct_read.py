"""Reading a topic's segment files straight from a data directory, without opening a `Log`.

For tools (`tidemark offsets dump`, the Spark offsets-log reader): nothing here recovers,
truncates, locks or writes, so it is safe on the data directory of a running broker. Segments
are append-only (a batch still being written shows up as a torn tail, which ends the read), but
the broker's cleaner replaces them (renames: old files away, the cleaned one in) and retention
deletes them, so a partition's segments are read as one set: listed, all opened, listed again
(an open file keeps its bytes whatever happens to its name); a listing that changed meanwhile,
or caught a swap half done (a `.swap` file), is taken again. Each segment must start where the
previous one ended; if not, the segments are listed again from there.
Only `<base offset>.log` files are read: segments in the middle of a clean (`.cleaned`,
`.swap`, `.deleted`) are the broker's business.
"""

from __future__ import annotations

import os
import re
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

from tidemark.records import (
    BatchHeader,
    RecordsError,
    decode_records,
    iter_batches,
    iter_timestamped_key_values,
)

from .local_log import SWAP_SUFFIX
from .segment import LOG_SUFFIX, pread_exact

Warn = Callable[[str], None]
# Listings taken before giving up on a consistent set of a partition's segments.
SNAPSHOT_ATTEMPTS = 10
# Test hook: called with (directory, segment file names) after each listing, before opening.
listing_hook: Callable[[Path, list[str]], None] | None = None


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


def _list_segments(log_dir: Path) -> tuple[list[str], bool]:
    """The `.log` file names in base offset order, and whether a cleaner swap is half done."""
    names = os.listdir(log_dir)
    logs = [n for n in names if n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit()]
    swapping = any(n.endswith(LOG_SUFFIX + SWAP_SUFFIX) for n in names)
    return sorted(logs, key=lambda n: int(n[: -len(LOG_SUFFIX)])), swapping


def _open_segments(log_dir: Path) -> list[tuple[int, str, int]] | None:
    """(base offset, name, descriptor) of every segment, opened as one consistent set, or None
    when the listing raced a segment swap or deletion (the caller lists again)."""
    names, swapping = _list_segments(log_dir)
    if listing_hook is not None:
        listing_hook(Path(log_dir), names)
    if swapping:
        return None
    opened: list[tuple[int, str, int]] = []
    try:
        for name in names:
            opened.append((int(name[: -len(LOG_SUFFIX)]), name, os.open(Path(log_dir) / name, os.O_RDONLY)))
        if _list_segments(log_dir) == (names, False):
            return opened
    except FileNotFoundError:
        pass
    for _, _, fd in opened:
        os.close(fd)
    return None


def _complete_end(data: bytes, base_offset: int) -> int:
    end = base_offset
    for _pos, header in iter_batches(data, validate=False):
        end = header.next_offset
    return end


def _snapshot(log_dir: Path, attempts: int) -> tuple[list[tuple[int, str, int]], int]:
    """_open_segments until it succeeds; also returns the attempts used so far."""
    while True:
        snapshot = _open_segments(log_dir)
        if snapshot is not None:
            return snapshot, attempts
        attempts += 1
        if attempts >= SNAPSHOT_ATTEMPTS:
            raise RuntimeError(f"{Path(log_dir).name}: its segments kept changing while being listed")
        time.sleep(0.01 * attempts)  # a swap is a few renames and a directory fsync


def iter_segment_data(log_dir: Path, *, warn: Warn = _ignore) -> Iterator[tuple[str, bytes, int]]:
    """(file name, bytes, first offset to use) of each segment of one partition directory, in
    offset order, without a range missed or read twice while a broker cleans or deletes
    segments (see the module's notes): records below `first offset to use` were yielded before."""
    resume: int | None = None  # where the previous segment ended
    attempts = 0
    while True:
        snapshot, attempts = _snapshot(log_dir, attempts)
        try:
            start = 0
            if resume is not None:  # from the segment holding `resume` on
                start = max(0, bisect_right([base for base, _, _ in snapshot], resume) - 1)
            relist = False
            for base, name, fd in snapshot[start:]:
                if resume is not None and base > resume:
                    attempts += 1
                    if attempts < SNAPSHOT_ATTEMPTS:
                        relist = True
                        break
                    warn(f"{Path(log_dir).name}: offsets {resume} to {base - 1} are gone (deleted meanwhile)")
                data = pread_exact(fd, os.fstat(fd).st_size, 0)
                first = base if resume is None else max(base, resume)
                yield name, data, first
                resume = max(first, _complete_end(data, base))
            if not relist:
                return
        finally:
            for _, _, fd in snapshot:
                os.close(fd)


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
    for name, data, first in iter_segment_data(log_dir, warn=warn):
        label = f"{Path(log_dir).name}/{name}"
        for header, records in iter_segment_batches(data, warn=warn, label=label, decode=_timestamped_key_values):
            if not header.is_control and header.next_offset > first:
                yield from (r for r in records if r[0] >= first)


def log_end_offset(log_dir: Path) -> int:
    """The offset after the last complete batch of a partition directory (its base offset for
    an empty last segment, 0 for a directory without segments)."""
    snapshot, _ = _snapshot(log_dir, 0)
    try:
        if not snapshot:
            return 0
        base, _, fd = snapshot[-1]  # the active segment: never replaced nor deleted
        return _complete_end(pread_exact(fd, os.fstat(fd).st_size, 0), base)
    finally:
        for _, _, fd in snapshot:
            os.close(fd)


__all__ = ["iter_log_records", "iter_segment_batches", "iter_segment_data", "log_end_offset", "segment_files", "topic_partition_dirs"]
