"""Kafka's OffsetCheckpointFile: the recovery-point, log-start-offset and cleaner-offset
checkpoint files of a data directory."""

from __future__ import annotations

import os
from pathlib import Path

from .local_log import fsync_directory

TopicPartition = tuple[str, int]
_CHECKPOINT_VERSION = 0


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Kafka's OffsetCheckpointFile: version line, entry count line, 'topic partition offset' lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != str(_CHECKPOINT_VERSION):
        raise ValueError(f"unrecognised checkpoint file {path.name}")
    count = int(lines[1])
    entries = {}
    for line in lines[2 : 2 + count]:
        topic, partition, offset = line.split()
        entries[(topic, int(partition))] = int(offset)
    if len(entries) != count:
        raise ValueError(f"checkpoint file {path.name} expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint(path: Path, entries: dict[TopicPartition, int]) -> None:
    """Atomically replace the file: write a temp file, fsync it, rename, fsync the directory."""
    lines = [str(_CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)
