"""The log cleaner on a compacted topic written by a real transactional client (librdkafka):
once cleaned, no aborted record is left in the log, and read_committed and read_uncommitted
consumers both see exactly the committed records' latest value per key."""

from __future__ import annotations

import time

import pytest

from tidemark.records import decode_records, iter_batches

TOPIC = "txn-compacted"
KEYS = 8
ROUNDS = 24
WAIT_S = 60.0  # a hang guard, not a margin
SETTINGS = {"log.cleaner.backoff.ms": "100"}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}


def _aborted_on_disk(partition_dir) -> int:
    """Records with an aborted value in the partition's segment files (-1: a file the cleaner
    was swapping, read again on the next call)."""
    count = 0
    for segment in sorted(partition_dir.glob("*.log")):
        try:
            data = segment.read_bytes()
        except FileNotFoundError:
            return -1
        for position, h in iter_batches(data, validate=False):
            if not h.is_control:
                count += sum(1 for r in decode_records(data, position) if r.value and r.value.startswith(b"aborted"))
    return count


def _latest(bootstrap: str, isolation: str, end: int) -> tuple[dict, list]:
    """Read partition 0 up to `end` (its high watermark): the latest value per key, every value."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cleaner-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, "log_level": 0})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    latest, values = {}, []
    deadline = time.monotonic() + WAIT_S
    position = 0
    try:
        while position < end and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                latest[msg.key()] = msg.value()
                values.append(msg.value())
            position = consumer.position([TopicPartition(TOPIC, 0)])[0].offset
    finally:
        consumer.close()
    assert position >= end, f"read up to {position} of {end}"
    return latest, values


def test_cleaning_removes_aborted_transactions_and_keeps_the_committed_latest_values(make_broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from tests.integration.clients import create_topic
    broker = make_broker(SETTINGS).start()
    create_topic(broker.bootstrap, TOPIC, 1, TOPIC_CONFIG)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cleaned-app",
                                         "linger.ms": 0, "log_level": 0})
    producer.init_transactions(WAIT_S)
    committed: dict[bytes, bytes] = {}
    for round_ in range(ROUNDS):
        # Every third transaction aborts, and the last: its keys' latest committed values are
        # older ones. Aborted ones also write keys no committed record has.
        commit = round_ % 3 != 1 and round_ != ROUNDS - 1
        producer.begin_transaction()
        for k in range(KEYS + (0 if commit else 2)):
            key = b"k%d" % k if k < KEYS else b"only-aborted-%d-%d" % (round_, k)
            value = (b"committed-%d-" % round_ if commit else b"aborted-%d-" % round_) + b"v" * 100
            producer.produce(TOPIC, key=key, value=value, partition=0)
            if commit:
                committed[key] = value
        producer.flush(WAIT_S)
        if commit:
            producer.commit_transaction(WAIT_S)
        else:
            producer.abort_transaction(WAIT_S)
    # Committed transactions until the aborted ones are all below the active segment (the newest
    # file's base offset: counting files would not do, the cleaner merges them meanwhile).
    partition_dir = broker.data_dir / f"{TOPIC}-0"
    watermarks = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    aborted_end = watermarks.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, 0), timeout=WAIT_S)[1]
    filler = 0
    while max(int(f.name.split(".")[0]) for f in partition_dir.glob("*.log")) <= aborted_end:
        producer.begin_transaction()
        producer.produce(TOPIC, key=b"filler", value=b"f" * 500, partition=0)
        producer.commit_transaction(WAIT_S)
        filler += 1
        assert filler < 100, "the partition never rolled"
    committed[b"filler"] = b"f" * 500

    deadline = time.monotonic() + WAIT_S
    while (aborted := _aborted_on_disk(partition_dir)) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    # The count that ended the wait: another look could meet a later cleaning's swap (-1).
    assert aborted == 0, f"aborted records left after cleaning ({aborted})"

    end = watermarks.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, 0), timeout=WAIT_S)[1]
    watermarks.close()
    for isolation in ("read_committed", "read_uncommitted"):
        latest, values = _latest(broker.bootstrap, isolation, end)
        assert latest == committed, isolation
        assert not [v for v in values if v.startswith(b"aborted")], isolation
    broker.stop()
