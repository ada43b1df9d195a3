"""`__transaction_state` records byte for byte as Kafka writes them (TransactionLogKey v0,
TransactionLogValue v0; v1, the flexible one, read too)."""

from __future__ import annotations

import struct

import pytest

from tidemark.records.transaction_log_schema import (
    TransactionLogValue,
    TransactionStatus,
    decode_transaction_key,
    decode_transaction_value,
    encode_transaction_key,
    encode_transaction_value,
)


def test_key_is_version_zero_then_the_transactional_id():
    assert encode_transaction_key("txn-1") == b"\x00\x00" + b"\x00\x05" + b"txn-1"
    assert decode_transaction_key(b"\x00\x00\x00\x05txn-1") == "txn-1"


def test_key_of_another_record_type_is_skipped():
    assert decode_transaction_key(b"\x00\x01\x00\x01x") is None


ONGOING = TransactionLogValue(
    producer_id=4000, producer_epoch=3, transaction_timeout_ms=60_000, status=TransactionStatus.ONGOING,
    partitions=(("orders", (0, 2)), ("__consumer_offsets", (49,))),
    last_update_timestamp_ms=1_700_000_000_500, start_timestamp_ms=1_700_000_000_000)

# Hand-built from TransactionLogValue.json v0: version, ProducerId int64, ProducerEpoch int16,
# TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions (int32 count; per
# entry Topic string, PartitionIds int32 count + int32s), TransactionLastUpdateTimestampMs int64,
# TransactionStartTimestampMs int64.
ONGOING_V0 = (
    b"\x00\x00"
    + b"\x00\x00\x00\x00\x00\x00\x0f\xa0"  # producer id 4000
    + b"\x00\x03"  # epoch 3
    + b"\x00\x00\xea\x60"  # 60000 ms
    + b"\x01"  # Ongoing
    + b"\x00\x00\x00\x02"  # two topics
    + b"\x00\x06orders" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02"
    + b"\x00\x12__consumer_offsets" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x31"
    + struct.pack(">q", 1_700_000_000_500)
    + struct.pack(">q", 1_700_000_000_000)
)


def test_value_v0_matches_kafkas_bytes():
    assert encode_transaction_value(ONGOING) == ONGOING_V0
    assert decode_transaction_value(ONGOING_V0) == ONGOING


def test_empty_transaction_writes_null_partitions():
    empty = TransactionLogValue(7, 0, 1000, TransactionStatus.EMPTY, None, 5, -1)
    encoded = encode_transaction_value(empty)
    assert encoded == (b"\x00\x00" + struct.pack(">qhib", 7, 0, 1000, 0) + b"\xff\xff\xff\xff"
                       + struct.pack(">qq", 5, -1))
    assert decode_transaction_value(encoded) == empty


def test_value_v1_flexible_is_read():
    # compact array of 1+1 topics, compact string, compact int32 array, struct tags, top-level tags
    v1 = (b"\x00\x01" + struct.pack(">qhib", 9, 2, 30_000, 2)
          + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 5) + b"\x00"
          + struct.pack(">qq", 11, 10)
          + b"\x01" + b"\x02\x02\x00\x02")  # one tagged field: ClientTransactionVersion (tag 2) = 2
    value = decode_transaction_value(v1)
    assert value == TransactionLogValue(9, 2, 30_000, TransactionStatus.PREPARE_COMMIT, (("t", (5,)),), 11, 10)
    assert decode_transaction_value(encode_transaction_value(value, version=1)) == value


def test_a_v1_value_cut_inside_a_varint_is_a_value_error():
    # (the tools that decode whole logs report a ValueError as one bad record and go on)
    head = b"\x00\x01" + struct.pack(">qhib", 9, 2, 30_000, 2)
    with pytest.raises(ValueError, match="varint"):
        decode_transaction_value(head + b"\x80")  # the topic count's first byte says more follow
    with pytest.raises(ValueError, match="varint"):
        decode_transaction_value(head + b"\x02" + b"\x82")  # the topic name's length


@pytest.mark.parametrize("status", list(TransactionStatus))
def test_status_names_are_kafkas(status):
    names = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
             5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
    assert status.kafka_name == names[status.value]
    assert TransactionStatus.from_kafka_name(names[status.value]) is status
