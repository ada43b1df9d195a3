import pytest

from tidemark.log import (
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    LogConfig,
    OutOfOrderSequenceError,
    UnifiedLog,
    UnknownProducerIdError,
)
from tidemark.log.producer_snapshot import encode, list_snapshots, read_snapshot, write_snapshot

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
        log = UnifiedLog.open(path, LogConfig(segment_bytes=300), now_ms=NOW)
        base = log.log_end_offset
        seq = base  # each round continues the same sequence
        originals = [produce(log, 42, 1, seq + i * 2) for i in range(6)]
        log.close()
        log = UnifiedLog.open(path, LogConfig(segment_bytes=300), clean_shutdown=clean, now_ms=NOW)
        dup = produce(log, 42, 1, seq + 10)
        assert dup.duplicate and dup.first_offset == originals[-1].first_offset
        with pytest.raises(OutOfOrderSequenceError):
            produce(log, 42, 1, seq + 14)
        with pytest.raises(InvalidProducerEpochError):
            produce(log, 42, 0, 0)
        log.close()


# -- producer ids the cluster never issued -------------------------------------------------


def test_unissued_producer_id_is_refused_and_creates_no_state(open_log):
    log = open_log()
    for pid in (1000, 1001, 2**62):  # at or above the end of the issued range
        with pytest.raises(UnknownProducerIdError):
            log.append(batch(1, producer_id=pid, producer_epoch=0, base_sequence=0), now_ms=NOW,
                       producer_id_end=1000)
    with pytest.raises(InvalidProducerIdMappingError):
        log.append(batch(1, producer_id=1000, producer_epoch=0, base_sequence=0, is_transactional=True),
                   now_ms=NOW, producer_id_end=1000)
    # One bad batch refuses the whole append, even after an issued producer's batch.
    issued = batch(1, producer_id=999, producer_epoch=0, base_sequence=0)
    with pytest.raises(UnknownProducerIdError):
        log.append(issued + batch(1, producer_id=5000, producer_epoch=0, base_sequence=0), now_ms=NOW,
                   producer_id_end=1000)
    assert log.producer_state.producers == {}
    assert log.log_end_offset == 0
    assert log.append(issued, now_ms=NOW, producer_id_end=1000).first_offset == 0
    assert list(log.producer_state.producers) == [999]
    assert log.append(batch(1), now_ms=NOW, producer_id_end=1000).first_offset == 1  # no producer id


# -- expiration ------------------------------------------------------------------------------


def test_producer_expires_after_producer_id_expiration_ms(open_log):
    log = open_log(LogConfig(producer_id_expiration_ms=60_000))
    produce(log, 7, 0, 0)  # batch max timestamp NOW + 1
    produce(log, 8, 0, 0)
    state = log.producer_state
    state.producers[8].batches[-1] = state.producers[8].batches[-1]._replace(timestamp=NOW + 30_000)
    assert state.remove_expired(NOW + 1 + 59_999) == 0
    assert state.remove_expired(NOW + 1 + 60_000) == 1  # Kafka: idle >= producer.id.expiration.ms
    assert list(state.producers) == [8]
    # Producer 7's retry is no longer recognised: it is a new producer, written again.
    retry = produce(log, 7, 0, 0)
    assert not retry.duplicate and retry.first_offset == 4
    assert produce(log, 8, 0, 0).duplicate


def test_expired_producers_are_not_restored_at_open(tmp_path):
    path = tmp_path / "t-0"
    config = LogConfig(producer_id_expiration_ms=60_000)
    log = UnifiedLog.open(path, config, now_ms=NOW)
    produce(log, 7, 0, 0)
    log.close()
    for now, known in ((NOW + 60_000, True), (NOW + 60_001, False)):
        log = UnifiedLog.open(path, config, clean_shutdown=True, now_ms=now)
        assert (7 in log.producer_state.producers) is known
        log.close(flush=False)


# -- snapshots -------------------------------------------------------------------------------


def test_snapshot_round_trip_and_corrupt_crc_is_rebuilt_by_scan(tmp_path):
    path = tmp_path / "t-0"
    log = UnifiedLog.open(path, LogConfig(), now_ms=NOW)
    for seq in range(0, 14, 2):
        produce(log, 3, 1, seq)
    produce(log, 4, 0, 0, n=1)
    end = log.log_end_offset
    log.close()
    snapshot = path / f"{end:020d}.snapshot"
    entries = read_snapshot(snapshot)
    assert [(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta) for e in entries] == [
        (3, 1, seq + 1, seq + 1, 1) for seq in range(4, 14, 2)  # the last five batches of producer 3
    ] + [(4, 0, 0, 14, 0)]
    assert all(e.timestamp == NOW + 1 for e in entries[:5]) and entries[5].timestamp == NOW
    assert encode(entries) == snapshot.read_bytes()

    # A snapshot whose CRC does not match is not trusted: here it claims other offsets.
    lying = bytearray(encode([e._replace(last_offset=e.last_offset + 100) for e in entries]))
    lying[2] ^= 0xFF
    snapshot.write_bytes(bytes(lying))
    log = UnifiedLog.open(path, LogConfig(), clean_shutdown=True, now_ms=NOW)
    assert not snapshot.exists()  # dropped, and the state rebuilt from the log instead
    dup = produce(log, 3, 1, 12)
    assert dup.duplicate and dup.first_offset == 12
    assert produce(log, 4, 0, 0, n=1).first_offset == 14
    log.close(flush=False)

    # With a valid CRC the same lie is believed: proof the snapshot, not a scan, is what loads.
    lying[2] ^= 0xFF
    snapshot.write_bytes(bytes(lying))
    log = UnifiedLog.open(path, LogConfig(), clean_shutdown=True, now_ms=NOW)
    assert produce(log, 3, 1, 12).first_offset == 112
    log.close(flush=False)


def test_snapshot_keeps_state_of_producers_whose_segments_retention_deleted(tmp_path):
    """The restart trusts the snapshot and scans only what follows it: producer 1 wrote only
    into a segment retention has since deleted, so no scan could find it."""
    path = tmp_path / "t-0"
    b = batch(1, producer_id=1, producer_epoch=0, base_sequence=0)
    config = LogConfig(segment_bytes=len(b), retention_bytes=1)
    log = UnifiedLog.open(path, config, now_ms=NOW)
    first = log.append(b, now_ms=NOW)  # segment 0
    log.append(batch(1, producer_id=2, producer_epoch=0, base_sequence=0), now_ms=NOW)  # roll: snapshot at 1
    log.update_high_watermark(log.log_end_offset)
    # Producer 1 is only in the roll's snapshot, written by the next flush: segment 0 stays until then.
    assert log.delete_retention(NOW) == 0
    log.flush()
    assert log.delete_retention(NOW) == 1 and log.log_start_offset == 1
    # Unclean (no snapshot at close): the snapshot at the roll to 1, then a scan of what follows.
    # Clean: the snapshot the close wrote at the end.
    for clean in (False, True):
        log.close(flush=clean)
        log = UnifiedLog.open(path, config, clean_shutdown=clean, now_ms=NOW, log_start_offset=1)
        dup = log.append(b, now_ms=NOW)
        assert dup.duplicate and dup.first_offset == first.first_offset
        dup = log.append(batch(1, producer_id=2, producer_epoch=0, base_sequence=0), now_ms=NOW)
        assert dup.duplicate and dup.first_offset == 1
        assert log.log_end_offset == 2
    log.close()


def test_snapshots_past_the_log_end_or_below_its_start_are_deleted(tmp_path):
    path = tmp_path / "t-0"
    b = batch(1, producer_id=1, producer_epoch=0, base_sequence=0)
    log = UnifiedLog.open(path, LogConfig(segment_bytes=len(b)), now_ms=NOW)
    for seq in range(6):
        log.append(batch(1, producer_id=1, producer_epoch=0, base_sequence=seq), now_ms=NOW)
    log.close()
    assert sorted(list_snapshots(path)) == [5, 6]  # the newest two: roll at 5, close at 6
    write_snapshot(path / f"{9:020d}.snapshot", [])  # past the end (a tail lost in a crash)
    write_snapshot(path / f"{2:020d}.snapshot", [])
    log = UnifiedLog.open(path, LogConfig(segment_bytes=len(b)), log_start_offset=3, clean_shutdown=True, now_ms=NOW)
    assert sorted(list_snapshots(path)) == [5, 6]
    assert log.append(batch(1, producer_id=1, producer_epoch=0, base_sequence=5), now_ms=NOW).duplicate
    log.close()
