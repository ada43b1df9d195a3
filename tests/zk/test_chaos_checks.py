"""The chaos tests' ledger: what a delivery report records, and what the checks make of it."""

from __future__ import annotations

from dataclasses import dataclass

from tests.zk.chaos_checks import Ledger, delivery_recorder, log_ends, offsetless_acks_missing


@dataclass
class _Message:
    """What a delivery callback reads of a confluent_kafka Message (offset None: librdkafka's -1)."""

    partition_: int
    offset_: int | None
    value_: bytes

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int | None:
        return self.offset_

    def value(self) -> bytes:
        return self.value_


def test_a_success_without_an_offset_is_kept_apart_and_the_log_ends_stay_integers():
    ledger = Ledger()
    ledger.phase = "round 2: pause_a_follower_and_kill_its_leader"
    delivered = delivery_recorder(ledger, "record")
    delivered(None, _Message(1, 7, b"record-7"))
    delivered(None, _Message(1, None, b"record-13"))  # librdkafka's implicit ack: no offset

    assert ledger.produced == {(1, 7): b"record-7"}
    assert ledger.offsetless_acks == [(1, b"record-13", "round 2: pause_a_follower_and_kill_its_leader")]
    assert log_ends(ledger, 2) == {0: 0, 1: 8}


def test_a_success_without_an_offset_is_a_violation_unless_its_record_is_in_its_partition():
    ledger = Ledger()
    delivered = delivery_recorder(ledger, "record")
    ledger.phase = "round 0: kill_the_controller"
    delivered(None, _Message(0, None, b"record-3"))
    delivered(None, _Message(0, None, b"record-9"))
    delivered(None, _Message(1, None, b"record-4"))
    read = {(0, 5): b"record-3", (0, 6): b"record-4"}  # record-4 read back in the wrong partition

    assert offsetless_acks_missing(ledger, read) == [
        "acknowledged without an offset: partition 0 value b'record-9' during round 0: kill_the_controller, "
        "and not in the log",
        "acknowledged without an offset: partition 1 value b'record-4' during round 0: kill_the_controller, "
        "and not in the log",
    ]
