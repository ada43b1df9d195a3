"""What an append checks depends on its origin (Kafka's AppendOrigin): a client's batches are
checked whole, CRC included, once (by the produce validator where it ran); the batches the coordinator builds in this process skip the CRC
check but are written byte for byte as a checked append writes them."""

from __future__ import annotations

import pytest

from tidemark.broker.errors import error_code_for
from tidemark.broker.validator import validate_produce
from tidemark.log import AppendOrigin, LogConfig, UnifiedLog, unified_log
from kio.schema.errors import ErrorCode
from tidemark.records import CorruptRecordError, build_key_value_batch

NOW = 1_700_000_000_000


def _log(path) -> UnifiedLog:
    return UnifiedLog.open(path, LogConfig(), now_ms=NOW)


def _file_bytes(log: UnifiedLog) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(log.directory.glob("*.log")))


def _batch(records: int, **kwargs) -> bytes:
    return build_key_value_batch([(b"key-%d" % i, b"value-%d" % i) for i in range(records)], NOW, **kwargs)


@pytest.mark.parametrize("batch", [
    _batch(1),
    _batch(100),
    _batch(3, producer_id=7, producer_epoch=2, is_transactional=True),
], ids=["1 record", "100 records", "transactional"])
def test_coordinator_append_writes_the_bytes_a_checked_append_writes(tmp_path, batch):
    checked, coordinator = _log(tmp_path / "a-0"), _log(tmp_path / "b-0")
    for epoch in (0, 0, 3):
        info = checked.append(batch, leader_epoch=epoch, now_ms=NOW, origin=AppendOrigin.CLIENT)
        assert coordinator.append(batch, leader_epoch=epoch, now_ms=NOW, origin=AppendOrigin.COORDINATOR) == info
    assert coordinator.log_end_offset == checked.log_end_offset
    assert _file_bytes(coordinator) == _file_bytes(checked)
    assert coordinator.local.read(0, 1 << 20, coordinator.log_end_offset) == _file_bytes(checked)


@pytest.mark.parametrize("origin", [None, AppendOrigin.CLIENT])
def test_a_client_batch_with_a_bad_crc_is_refused_as_corrupt_and_nothing_is_written(tmp_path, origin):
    log = _log(tmp_path / "t-0")
    corrupt = bytearray(_batch(2))
    corrupt[-1] ^= 0xFF  # a byte of the last record's value: covered by the CRC only
    kwargs = {} if origin is None else {"origin": origin}  # CLIENT is the default
    with pytest.raises(CorruptRecordError) as info:
        log.append(bytes(corrupt), now_ms=NOW, **kwargs)
    assert error_code_for(info.value) == ErrorCode.corrupt_message
    assert log.log_end_offset == 0
    assert _file_bytes(log) == b""


@pytest.mark.parametrize("records", [
    lambda b: b[:-1],            # the batch cut short
    lambda b: b + b"\x00" * 7,   # bytes after the last whole batch
    lambda b: b"\x00" * 12,      # no batch at all
], ids=["partial", "trailing", "garbage"])
def test_coordinator_bytes_that_are_not_whole_batches_are_refused(tmp_path, records):
    log = _log(tmp_path / "t-0")
    with pytest.raises(CorruptRecordError):
        log.append(records(_batch(2)), now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 0
    assert _file_bytes(log) == b""


def test_a_produce_batch_the_validator_checked_is_written_as_a_checked_append_writes(tmp_path, monkeypatch):
    batch = _batch(5, producer_id=7, producer_epoch=0)
    header = validate_produce(batch, LogConfig(), topic="t", partition=0, internal=False)
    walked, once = _log(tmp_path / "a-0"), _log(tmp_path / "b-0")
    expected = walked.append(batch, now_ms=NOW)
    # The validator's check is the only one: the append does not walk or checksum the batch again.
    monkeypatch.setattr(unified_log, "iter_batches", _no_second_walk)
    assert once.append(bytearray(batch), now_ms=NOW, checked=header) == expected
    assert _file_bytes(once) == _file_bytes(walked)


def test_a_checked_header_that_is_not_the_whole_append_leaves_it_to_the_full_check(tmp_path):
    log = _log(tmp_path / "t-0")
    header = validate_produce(_batch(2), LogConfig(), topic="t", partition=0, internal=False)
    corrupt = bytearray(_batch(2)) + _batch(1)  # another batch behind the one checked
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(bytes(corrupt), now_ms=NOW, checked=header)
    assert log.log_end_offset == 0


def _no_second_walk(*args, **kwargs):
    raise AssertionError("the batch was walked again")
