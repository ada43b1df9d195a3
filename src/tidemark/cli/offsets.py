"""`tidemark offsets`: look inside the `__consumer_offsets` topic.

`tidemark offsets dump` reads the segment files of the offsets partitions (or, with
`--topic __transaction_state`, the transaction log's) straight from a data directory and prints
one line per record, like kafka-dump-log's offsets and transaction log decoders:

    partition: 7 offset: 0 key: {"group":"g","topic":"t","partition":0} value: {"offset":42,...}

Values print as compact JSON of the decoded record (bytes fields as base64), a null value as
`<tombstone>`, and a key of a record type tidemark does not decode as `unknown version N`.
A transactional offset commit (TxnOffsetCommit, pending until its marker) ends with
`transactional: {"producer_id":P,"producer_epoch":E}`, and a transaction marker prints as
`control: COMMIT` or `control: ABORT` followed by its producer and coordinator epoch.
Stdout carries only these lines so they can be piped; warnings and the progress bar go to stderr.
It is safe on a running broker's data directory: segments the cleaner swaps or retention deletes
mid-read are neither missed nor printed twice (see tidemark.log.direct_read).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import click

from tidemark.log.direct_read import (
    iter_segment_batches,
    iter_segment_data,
    segment_files,
    topic_partition_dirs,
)
from tidemark.records import consumer_group_schema
from tidemark.records.offsets_schema import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from tidemark.records.transaction_log_schema import (
    TRANSACTION_STATE_TOPIC,
    decode_transaction_key,
    decode_transaction_value,
)

_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}


def _json_default(obj):
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode("ascii")
    raise TypeError(f"cannot render {type(obj).__name__}")


def render(record) -> str:
    """Compact JSON of a decoded key or value dataclass; bytes fields as base64."""
    return json.dumps(
        dataclasses.asdict(record), separators=(",", ":"), ensure_ascii=False, default=_json_default
    )


def format_record(partition: int, offset: int, key: bytes | None, value: bytes | None) -> str:
    """One dump line for a (non-control) record of an offsets partition."""
    prefix = f"partition: {partition} offset: {offset}"
    if key is None:
        decoded_key = None
        key_text = "<null>"
    else:
        try:
            decoded_key = decode_key(key)
        except ValueError as exc:
            decoded_key = None
            key_text = f"<malformed: {exc}>"
        else:
            if isinstance(decoded_key, UnknownKey) and decoded_key.version in consumer_group_schema.RECORD_TYPES:
                try:
                    decoded_key = consumer_group_schema.decode_key(key)
                    key_text = consumer_group_schema.to_json(decoded_key)
                except ValueError as exc:
                    decoded_key = None
                    key_text = f"<malformed: {exc}>"
            elif isinstance(decoded_key, UnknownKey):
                key_text = f"unknown version {decoded_key.version}"
            else:
                key_text = render(decoded_key)
    if value is None:
        value_text = "<tombstone>"
    elif isinstance(decoded_key, OffsetCommitKey | GroupMetadataKey):
        decode = decode_offset_commit_value if isinstance(decoded_key, OffsetCommitKey) else decode_group_metadata_value
        try:
            value_text = render(decode(value))
        except ValueError as exc:
            value_text = f"<malformed: {exc}>"
    elif isinstance(decoded_key, consumer_group_schema.ConsumerGroupKey):
        try:
            value_text = consumer_group_schema.to_json(consumer_group_schema.decode_value(decoded_key.record_type, value))
        except ValueError as exc:
            value_text = f"<malformed: {exc}>"
    else:
        value_text = f"<{len(value)} bytes>"
    return f"{prefix} key: {key_text} value: {value_text}"


def format_transaction_record(partition: int, offset: int, key: bytes | None, value: bytes | None) -> str:
    """One dump line for a record of a `__transaction_state` partition."""
    prefix = f"partition: {partition} offset: {offset}"
    try:
        transactional_id = None if key is None else decode_transaction_key(key)
        key_text = "<null>" if key is None else (
            f"unknown version {struct.unpack_from('>h', key)[0]}" if transactional_id is None
            else json.dumps({"transactional_id": transactional_id}, separators=(",", ":"), ensure_ascii=False))
        if value is None:
            value_text = "<tombstone>"
        elif transactional_id is None:
            value_text = f"<{len(value)} bytes>"
        else:
            decoded = decode_transaction_value(value)
            value_text = json.dumps({
                "producer_id": decoded.producer_id, "producer_epoch": decoded.producer_epoch,
                "transaction_timeout_ms": decoded.transaction_timeout_ms, "state": decoded.status.kafka_name,
                "partitions": None if decoded.partitions is None else {t: list(ps) for t, ps in decoded.partitions},
                "last_update_timestamp_ms": decoded.last_update_timestamp_ms,
                "start_timestamp_ms": decoded.start_timestamp_ms}, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        return f"{prefix} <malformed: {exc}>"
    return f"{prefix} key: {key_text} value: {value_text}"


def _transaction(producer_id: int, producer_epoch: int, **more: int) -> str:
    return " transactional: " + json.dumps({"producer_id": producer_id, "producer_epoch": producer_epoch, **more},
                                           separators=(",", ":"))


def format_control_record(partition: int, offset: int, key: bytes | None, value: bytes | None = None,
                          producer: tuple[int, int] | None = None) -> str:
    """A transaction marker (transactional offset commits end with one), with the transaction's
    producer id and epoch and the coordinator epoch when known."""
    if key is not None and len(key) >= 4:
        _version, kind = struct.unpack_from(">hh", key)
        marker = _CONTROL_TYPES.get(kind, f"type {kind}")
    else:
        marker = "<malformed>"
    line = f"partition: {partition} offset: {offset} control: {marker}"
    if producer is not None and producer[0] >= 0:
        extra = {}
        if value is not None and len(value) >= 6:
            extra["coordinator_epoch"] = struct.unpack_from(">hi", value)[1]
        line += _transaction(*producer, **extra)
    return line


def dump_segment(partition: int, data: bytes, warn=lambda message: None, first_offset: int = 0,
                 topic: str = OFFSETS_TOPIC) -> Iterator[str]:
    """The dump lines of one segment file's bytes (concatenated RecordBatch v2 batches), from
    first_offset on."""
    formatter = format_transaction_record if topic == TRANSACTION_STATE_TOPIC else format_record
    for header, records in iter_segment_batches(data, warn=warn, label=f"partition {partition}"):
        if header.next_offset <= first_offset:
            continue
        for record in records:
            if record.offset < first_offset:
                continue
            if header.is_control:
                yield format_control_record(partition, record.offset, record.key, record.value,
                                            (header.producer_id, header.producer_epoch))
            elif header.is_transactional:
                yield format_record(partition, record.offset, record.key, record.value) + \
                    _transaction(header.producer_id, header.producer_epoch)
            else:
                yield formatter(partition, record.offset, record.key, record.value)


def partition_dirs(data_dir: Path, partition: int | None, topic: str = OFFSETS_TOPIC) -> list[tuple[int, Path]]:
    """The offsets (or transaction log) partition directories to dump, in partition order."""
    if partition is not None:
        path = data_dir / f"{topic}-{partition}"
        if not path.is_dir():
            raise click.ClickException(f"no {topic}-{partition} directory in {data_dir}")
        return [(partition, path)]
    if topic == TRANSACTION_STATE_TOPIC:
        directories = topic_partition_dirs(Path(data_dir), topic)
        if not directories:
            raise click.ClickException(f"no {topic}-N directories in {data_dir}: no transactional producer has "
                                       f"used this broker yet")
        return directories
    return require_offsets_partitions(data_dir)


def require_offsets_partitions(data_dir: str | Path) -> list[tuple[int, Path]]:
    """The offsets partition directories of data_dir; none is an error saying the likely reasons (the
    wrong directory, or a broker no group has committed to yet: the topic is created on first use),
    rather than an empty answer and success."""
    directories = topic_partition_dirs(Path(data_dir), OFFSETS_TOPIC)
    if not directories:
        raise click.ClickException(f"no {OFFSETS_TOPIC}-N directories in {data_dir}: not a tidemark data directory, "
                                   f"or no consumer group has committed offsets to it yet")
    return directories


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # swapped or deleted by a running broker since the listing
        return 0


@click.group()
def offsets() -> None:
    """Inspect the __consumer_offsets topic."""


@offsets.command()
@click.option(
    "--data-dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The broker's data directory (holding __consumer_offsets-N directories).",
)
@click.option("--partition", type=click.IntRange(min=0), default=None, help="Only this partition (default: all).")
@click.option("--topic", type=click.Choice([OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC]), default=OFFSETS_TOPIC,
              show_default=True, help="Which coordinator log to decode.")
def dump(data_dir: Path, partition: int | None, topic: str) -> None:
    """Decode the __consumer_offsets segment files: one line per record on stdout.

    Safe on a running broker's directory: segments it cleans or deletes meanwhile are neither
    missed nor printed twice."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    stderr = Console(stderr=True)

    def warn(message: str) -> None:
        stderr.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)

    directories = partition_dirs(data_dir, partition, topic)
    printed = 0
    progress = None
    sizes = [_size(segment) for _, directory in directories for segment in segment_files(directory)]
    if len(sizes) > 1:
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=stderr,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        task = progress.add_task(topic, total=sum(sizes))
        progress.start()
    try:
        for number, directory in directories:
            for name, data, first in iter_segment_data(directory, warn=warn):
                if progress is not None:
                    progress.update(task, description=f"{topic}-{number}/{name}")
                for line in dump_segment(number, data, warn, first, topic):
                    click.echo(line)
                    printed += 1
                if progress is not None:
                    progress.advance(task, len(data))
    finally:
        if progress is not None:
            progress.stop()
    if not printed:
        click.echo(f"{len(directories)} {topic} partition(s) in {data_dir}, no records in them", err=True)


__all__ = ["dump", "dump_segment", "format_control_record", "format_record", "format_transaction_record", "offsets", "partition_dirs", "render",
           "require_offsets_partitions"]
