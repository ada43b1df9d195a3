"""Crashes lose no acknowledged write, and a torn or garbage tail is truncated, never served."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.clients import consume_assigned, create_topic, produce_all
from tests.integration.raw import RawClient
from tidemark.records import build_batch

PARTITIONS = 3
STORM_MAX_MESSAGES = 300_000
STORM_MAX_SECONDS = 20.0


def _storm_until_killed(broker, topic: str) -> dict[tuple[int, int], bytes]:
    """Produce with acks=all until the broker is SIGKILLed mid-storm; return what was acknowledged."""
    acknowledged: dict[tuple[int, int], bytes] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 3000, "retries": 0})

    def on_delivery(err, msg) -> None:
        if err is None:
            acknowledged[(msg.partition(), msg.offset())] = msg.value()

    killer = threading.Timer(1.5, broker.kill)
    killer.start()
    deadline = time.monotonic() + STORM_MAX_SECONDS
    try:
        for i in range(STORM_MAX_MESSAGES):
            if broker.process.poll() is not None or time.monotonic() > deadline:
                break
            try:
                producer.produce(topic, value=b"storm-%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
    finally:
        killer.join(timeout=10)
        producer.flush(5)  # delivery reports for what the broker answered before it died
    assert broker.process.poll() is not None, "the broker was not killed during the storm"
    return acknowledged


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _assert_contiguous_and_acknowledged(seen, acknowledged) -> None:
    for partition in range(PARTITIONS):
        offsets = [offset for offset, _, _ in seen.get(partition, [])]
        assert offsets == list(range(len(offsets))), f"partition {partition}: offsets not contiguous"
    read = {(p, o): v for p, records in seen.items() for o, _, v in records}
    missing = [key for key in acknowledged if key not in read]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
    wrong = [key for key, value in acknowledged.items() if read[key] != value]
    assert not wrong, f"{len(wrong)} acknowledged messages changed, e.g. {wrong[:3]}"


def test_sigkill_during_acks_all_storm_loses_nothing_acknowledged(make_broker):
    broker = make_broker().start()
    create_topic(broker.bootstrap, "storm", PARTITIONS)
    acknowledged = _storm_until_killed(broker, "storm")
    assert len(acknowledged) > 1000, "too few acknowledgements before the kill to prove anything"

    restarted = make_broker(data_dir=broker.data_dir, port=broker.port).start()
    # Read every partition to its end: the log also holds writes that were never acknowledged.
    ends = _end_offsets(restarted.bootstrap, "storm")
    total = sum(ends.values())
    assert total >= len(acknowledged)
    seen = consume_assigned(restarted.bootstrap, "storm", PARTITIONS, expected=total, timeout_s=30)
    assert {p: len(seen.get(p, [])) for p in range(PARTITIONS)} == ends
    _assert_contiguous_and_acknowledged(seen, acknowledged)
    # The log continues at the right offsets after recovery.
    produce_all(restarted.bootstrap, "storm", [(0, None, b"after-restart")])
    after = consume_assigned(restarted.bootstrap, "storm", PARTITIONS, expected=total + 1, timeout_s=30)
    assert after[0][-1] == (ends[0], None, b"after-restart")
    restarted.stop()


def _active_segment(data_dir: Path, topic: str, partition: int) -> Path:
    return sorted((data_dir / f"{topic}-{partition}").glob("*.log"))[-1]


@pytest.mark.parametrize("shutdown", ["sigkill", "clean"])
def test_garbage_tail_is_truncated_at_restart(make_broker, shutdown):
    broker = make_broker().start()
    create_topic(broker.bootstrap, "torn", 1)
    produce_all(broker.bootstrap, "torn", [(0, b"k%d" % i, b"v%d" % i) for i in range(500)])
    if shutdown == "sigkill":
        broker.kill()
    else:
        assert broker.stop() == 0
    segment = _active_segment(broker.data_dir, "torn", 0)
    good_size = segment.stat().st_size
    with open(segment, "ab") as f:
        # Looks like the start of a batch (base offset 500, a plausible length) and then junk.
        f.write((500).to_bytes(8, "big") + (200).to_bytes(4, "big") + b"\x00\x00\x00\x00\x02" + b"\xab" * 150)

    restarted = make_broker(data_dir=broker.data_dir, port=broker.port).start()
    assert segment.stat().st_size == good_size, "the garbage tail was not truncated"
    assert '"event": "log_truncated_at_recovery"' in restarted.log_text()
    seen = consume_assigned(restarted.bootstrap, "torn", 1, expected=500, timeout_s=30)
    assert seen[0] == [(i, b"k%d" % i, b"v%d" % i) for i in range(500)]
    produce_all(restarted.bootstrap, "torn", [(0, b"new", b"next")])
    seen = consume_assigned(restarted.bootstrap, "torn", 1, expected=501, timeout_s=30)
    assert seen[0][-1] == (500, b"new", b"next")
    restarted.stop()


def test_clean_shutdown_writes_marker_and_checkpoints(make_broker):
    broker = make_broker().start()
    create_topic(broker.bootstrap, "clean", 2)
    produce_all(broker.bootstrap, "clean", [(i % 2, None, b"x") for i in range(100)])
    assert broker.stop() == 0
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    checkpoint = (broker.data_dir / "recovery-point-offset-checkpoint").read_text().splitlines()
    assert checkpoint[:2] == ["0", "2"]
    assert sorted(checkpoint[2:]) == ["clean 0 50", "clean 1 50"]
    restarted = make_broker(data_dir=broker.data_dir, port=broker.port).start()
    assert not (broker.data_dir / ".kafka_cleanshutdown").exists()  # a crash from now on is unclean
    seen = consume_assigned(restarted.bootstrap, "clean", 2, expected=100, timeout_s=30)
    assert {p: len(v) for p, v in seen.items()} == {0: 50, 1: 50}
    restarted.stop()


@pytest.mark.parametrize("shutdown", ["clean", "sigkill"])
def test_retried_idempotent_batches_are_deduplicated_after_restart(make_broker, shutdown):
    """Producer 1 wrote only into a segment retention deleted, so its state exists only in the
    producer-state snapshot taken when that segment rolled; producer 2 wrote after it. Clean:
    the snapshot written at shutdown holds both. SIGKILL: the snapshot at the roll, then a scan
    of the batches after it. Either way both retries get their original offsets and nothing is
    written twice."""
    broker = make_broker({"log.retention.check.interval.ms": "50"}).start()
    with RawClient(broker.bootstrap) as client:
        # One batch per segment; retention deletes every segment but the active one.
        assert client.create_topic("dedup", configs={"segment.bytes": "100", "retention.bytes": "1"}).error_code == 0
        batches = [build_batch([(None, b"v%d" % i, (), None)], producer_id=client.init_producer_id(),
                               producer_epoch=0, base_sequence=0) for i in range(2)]
        assert [client.produce("dedup", b).base_offset for b in batches] == [0, 1]
        deadline = time.monotonic() + 30
        while client.list_offset("dedup", -2).offset != 1:
            assert time.monotonic() < deadline, "retention did not delete the first segment"
            time.sleep(0.05)
    if shutdown == "clean":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    with RawClient(broker.bootstrap) as client:
        for offset, b in enumerate(batches):
            response = client.produce("dedup", b)
            assert (response.error_code, response.base_offset) == (0, offset)
        assert client.list_offset("dedup", -1).offset == 2
