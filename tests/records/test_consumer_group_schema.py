"""The KIP-848 records against bytes built by hand from Kafka's message definitions
(ConsumerGroup*Key/Value.json): keys as int16 type + int16-length strings, values as version 0
in the flexible encoding (compact strings and arrays, uuids as 16 bytes, tag sections)."""

from __future__ import annotations

import uuid

import pytest

from tidemark.records import consumer_group_schema as cg
from tidemark.records.consumer_group_schema import ConsumerGroupKey

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")
TID = bytes.fromhex("0123456789abcdef0123456789abcdef")


@pytest.mark.parametrize("key, expected", [
    (ConsumerGroupKey(3, "g"), b"\x00\x03\x00\x01g"),
    (ConsumerGroupKey(4, "g"), b"\x00\x04\x00\x01g"),
    (ConsumerGroupKey(5, "g", "m"), b"\x00\x05\x00\x01g\x00\x01m"),
    (ConsumerGroupKey(6, "g"), b"\x00\x06\x00\x01g"),
    (ConsumerGroupKey(7, "g", "m"), b"\x00\x07\x00\x01g\x00\x01m"),
    (ConsumerGroupKey(8, "g", "m"), b"\x00\x08\x00\x01g\x00\x01m"),
])
def test_keys_are_kafkas_bytes(key, expected):
    assert cg.encode_key(key) == expected
    assert cg.decode_key(expected) == key


VALUES = [
    (3, cg.GroupMetadataValue(10), b"\x00\x00" + b"\x00\x00\x00\x0a" + b"\x00"),
    (4, cg.PartitionMetadataValue((cg.TopicMetadata(TOPIC_ID, "foo", 6),)),
     b"\x00\x00" + b"\x02" + TID + b"\x04foo" + b"\x00\x00\x00\x06" + b"\x01" + b"\x00" + b"\x00"),
    (5, cg.MemberMetadataValue(None, "r", "c", "/h", ("foo",), None, 30000, "uniform"),
     b"\x00\x00" + b"\x00" + b"\x02r" + b"\x02c" + b"\x03/h" + b"\x02\x04foo" + b"\x00" + b"\x00\x00\x75\x30"
     + b"\x08uniform" + b"\x00"),
    (6, cg.TargetAssignmentMetadataValue(7), b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00"),
    (7, cg.TargetAssignmentMemberValue({TOPIC_ID: frozenset({3})}),
     b"\x00\x00" + b"\x02" + TID + b"\x02\x00\x00\x00\x03" + b"\x00" + b"\x00"),
    (8, cg.CurrentMemberAssignmentValue(5, 4, 1, {TOPIC_ID: frozenset({0, 1})}, {}),
     b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x01"
     + b"\x02" + TID + b"\x03\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00" + b"\x01" + b"\x00"),
]


@pytest.mark.parametrize("record_type, value, expected", VALUES)
def test_values_are_kafkas_bytes(record_type, value, expected):
    assert cg.encode_value(record_type, value) == expected
    assert cg.decode_value(record_type, expected) == value


def test_tagged_fields_of_newer_kafka_versions_are_skipped():
    # Kafka 4.1 adds MetadataHash (tag 0, int64) to the group metadata value.
    data = b"\x00\x00" + b"\x00\x00\x00\x0a" + b"\x01" + b"\x00\x08" + b"\x00" * 7 + b"\x2a"
    assert cg.decode_value(3, data) == cg.GroupMetadataValue(10)


def test_malformed_values_are_refused():
    with pytest.raises(ValueError):
        cg.decode_value(3, b"\x00\x00\x00\x00")  # truncated epoch
    with pytest.raises(ValueError):
        cg.decode_value(3, b"\x00\x01\x00\x00\x00\x0a\x00")  # unknown version
