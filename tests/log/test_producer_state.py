import pytest

from tidemark.log import InvalidProducerEpochError, UnifiedLog, LogConfig, OutOfOrderSequenceError

from .conftest import NOW, batch


def produce(log: UnifiedLog, pid: int, epoch: int, seq: int, n: int = 2):
    return log.append(batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq), now_ms=NOW)


def test_duplicate_of_any_of_the_last_five_batches(open_log):
    log = open_log()
    infos = [produce(log, 7, 0, seq) for seq in range(0, 20, 2)]  # 10 batches, seq 0..19
    end = log.log_end_offset
    for original, seq in zip(infos[-5:], range(10, 20, 2)):
        dup = produce(log, 7, 0, seq)
        assert dup.duplicate
        assert (dup.first_offset, dup.last_offset) == (original.first_offset, original.last_offset)
    assert log.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 7, 0, 8)  # older than the cached five: not recognised, out of order
    assert not produce(log, 7, 0, 20).duplicate


def test_sequence_and_epoch_errors(open_log):
    log = open_log()
    produce(log, 1, 3, 100)  # unknown producer: any starting sequence
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 1, 3, 103)  # gap
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 1, 3, 100, n=1)  # overlaps but not an exact duplicate
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 1, 2, 102)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 1, 4, 5)  # a new epoch starts at 0
    assert produce(log, 1, 4, 0).first_offset == 2
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 1, 3, 102)
    assert log.log_end_offset == 4


def test_sequence_wraps_at_int32(open_log):
    log = open_log()
    produce(log, 9, 0, 2**31 - 2, n=2)  # last sequence 2^31 - 1
    assert produce(log, 9, 0, 0).first_offset == 2


def test_non_idempotent_batches_are_not_tracked(open_log):
    log = open_log()
    b = batch(2)
    assert not log.append(b, now_ms=NOW).duplicate
    assert log.append(b, now_ms=NOW).first_offset == 2


def test_errors_in_one_batch_store_nothing_of_the_request(open_log):
    log = open_log()
    produce(log, 5, 0, 0)
    good = batch(2, producer_id=5, producer_epoch=0, base_sequence=2)
    bad = batch(2, producer_id=5, producer_epoch=0, base_sequence=9)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(good + bad, now_ms=NOW)
    follow = batch(2, producer_id=5, producer_epoch=0, base_sequence=4)
    assert log.append(good + follow, now_ms=NOW).first_offset == 2  # in-request sequencing
    assert log.log_end_offset == 6


def test_state_survives_reopen(tmp_path):
    path = tmp_path / "t-0"
    for clean in (True, False):
        log = UnifiedLog.open(path, LogConfig(segment_bytes=300))
        base = log.log_end_offset
        seq = base  # each round continues the same sequence
        originals = [produce(log, 42, 1, seq + i * 2) for i in range(6)]
        log.close()
        log = UnifiedLog.open(path, LogConfig(segment_bytes=300), clean_shutdown=clean)
        dup = produce(log, 42, 1, seq + 10)
        assert dup.duplicate and dup.first_offset == originals[-1].first_offset
        with pytest.raises(OutOfOrderSequenceError):
            produce(log, 42, 1, seq + 14)
        with pytest.raises(InvalidProducerEpochError):
            produce(log, 42, 0, 0)
        log.close()
