"""Kafka's CheckpointFile: a version line, an entry count line, then one line per entry.

OffsetCheckpointFile (the recovery-point, log-start-offset and cleaner-offset checkpoints of a
data directory) is one use; the leader-epoch-checkpoint of a partition is another."""

from __future__ import annotations

import os
from pathlib import Path

from .local_log import fsync_directory

TopicPartition = tuple[str, int]
_CHECKPOINT_VERSION = 0


def read_checkpoint_entries(path: Path) -> list[list[str]] | None:
    """The entry lines of a checkpoint file, split on whitespace; None if there is no file.
    Raises ValueError for an unknown version or a wrong entry count."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 2 or lines[0].strip() != str(_CHECKPOINT_VERSION):
        raise ValueError(f"unrecognised checkpoint file {path.name}")
    count = int(lines[1])
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise ValueError(f"checkpoint file {path.name} expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint_entries(path: Path, entries: list[str]) -> None:
    """Atomically replace the file: write a temp file, fsync it, rename, fsync the directory."""
    lines = [str(_CHECKPOINT_VERSION), str(len(entries)), *entries]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Kafka's OffsetCheckpointFile: 'topic partition offset' lines."""
    entries = {}
    for fields in read_checkpoint_entries(path) or []:
        topic, partition, offset = fields
        entries[(topic, int(partition))] = int(offset)
    return entries


def write_checkpoint(path: Path, entries: dict[TopicPartition, int]) -> None:
    write_checkpoint_entries(path, [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())])
