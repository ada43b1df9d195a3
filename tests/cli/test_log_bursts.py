"""One summary line on the console where a broker logged one line per offsets partition (50 by
default) when the offsets topic was created and again when it stopped (JSON keeps every line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
from confluent_kafka import Consumer, TopicPartition

from tests.conftest import BrokerProcess
from tidemark.logging import Coalescer


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def msg(self, text: str) -> None:
        self.lines.append(json.loads(text))


def coalescer() -> tuple[Coalescer, list]:
    scheduled: list = []
    return Coalescer(structlog.processors.JSONRenderer(), lambda _delay, action: scheduled.append(action)), scheduled


def loaded(partition: int, records: int = 0) -> dict:
    return {"event": "offsets_partition_loaded", "level": "info", "partition": partition, "epoch": 0,
            "records": records, "keys": records, "groups": 0, "seconds": 0.01 * partition}


def test_a_burst_is_one_line_written_before_the_next_other_line() -> None:
    process, _scheduled = coalescer()
    out = Lines()
    for p in [*range(0, 10), 12, 13]:
        with pytest.raises(structlog.DropEvent):
            process(out, "info", loaded(p, records=2))
    assert out.lines == []
    after = {"event": "broker_stopped", "level": "info"}
    assert process(out, "info", after) is after
    assert out.lines == [{"event": "offsets_partitions_loaded", "level": "info", "count": 12,
                          "partitions": "0-9,12-13", "records": 24, "keys": 24, "groups": 0, "seconds": 0.13}]


def test_a_burst_nothing_follows_is_written_when_quiet_and_a_burst_of_one_stays_as_it_was() -> None:
    process, scheduled = coalescer()
    out = Lines()
    with pytest.raises(structlog.DropEvent):
        process(out, "info", loaded(7))
    with pytest.raises(structlog.DropEvent):
        process(out, "info", {"event": "offsets_partition_unloaded", "level": "info", "partition": 3})
    assert out.lines == [loaded(7)]  # another kind of burst began
    scheduled[0]()  # the first burst's timer: already written, nothing more
    assert len(out.lines) == 1
    scheduled[-1]()
    assert out.lines[1] == {"event": "offsets_partition_unloaded", "level": "info", "partition": 3}


def test_a_broker_logs_one_line_per_burst_on_the_console(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra_args=("--log-format", "console")).start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    try:
        assert consumer.committed([TopicPartition("t", 0)], timeout=60)[0].offset < 0  # the offsets topic exists
    finally:
        consumer.close()
    assert broker.stop() == 0
    lines = broker.log_text().splitlines()
    assert [line for line in lines if "offsets_partition_loaded" in line or "offsets_partition_unloaded" in line] == []
    summaries = [line for line in lines if "offsets_partitions_" in line]
    assert len(summaries) == 2
    assert "offsets_partitions_loaded" in summaries[0] and "count=50" in summaries[0]
    assert "partitions=0-49" in summaries[0]
    assert "offsets_partitions_unloaded" in summaries[1] and "count=50" in summaries[1]
