"""Transactions in the partition log: markers, the last stable offset, the .txnindex of aborted
transactions, and producer state that survives a restart (Kafka's bytes, Kafka's rules)."""

import struct

import pytest

from tidemark.log import InvalidProducerEpochError, LogConfig
from tidemark.log.errors import InvalidTxnStateError, TransactionCoordinatorFencedError
from tidemark.log.producer_snapshot import list_snapshots, read_snapshot
from tidemark.log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode, encode
from tidemark.records import iter_batches, read_header
from tidemark.records.control import build_marker_batch, read_marker

from .conftest import NOW, batch


def txn(log, pid, epoch, seq, n=2):
    return log.append(batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True),
                      now_ms=NOW)


def plain(log, n=1):
    return log.append(batch(n), now_ms=NOW)


def marker(log, pid, epoch, commit, coordinator_epoch=0):
    info, completed = log.append_marker(pid, epoch, commit, coordinator_epoch, now_ms=NOW)
    return info.first_offset


def test_control_batch_bytes_are_kafkas():
    data = build_marker_batch(7, 3, True, 5, NOW, base_offset=10)
    h = read_header(data)
    assert h.attributes & 0x30 == 0x30  # control and transactional bits
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (7, 3, -1, 1)
    [(_, h2)] = list(iter_batches(data))  # its CRC checks
    from tidemark.records import decode_records
    [record] = decode_records(data)
    assert record.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x05"  # version 0, coordinator epoch 5
    assert read_marker(data) == (True, 5)
    abort = decode_records(build_marker_batch(7, 3, False, 0, NOW))[0]
    assert abort.key == b"\x00\x00\x00\x00"


def test_txn_index_entry_is_34_bytes_of_kafkas_layout(tmp_path):
    entry = AbortedTxn(producer_id=9, first_offset=100, last_offset=120, last_stable_offset=121)
    data = encode(entry)
    assert len(data) == ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 9, 100, 120, 121)
    assert decode(data * 2) == [entry, entry]
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(entry)
    index.append(AbortedTxn(10, 130, 140, 141))
    assert (tmp_path / "00000000000000000000.txnindex").read_bytes() == data + encode(AbortedTxn(10, 130, 140, 141))
    index.truncate_to(140)
    assert TransactionIndex(index.path).entries == [entry]


def test_lso_is_the_first_offset_of_the_earliest_open_transaction(open_log):
    log = open_log()
    plain(log, 2)  # 0-1
    txn(log, 1, 0, 0)  # 2-3, producer 1's transaction
    plain(log)  # 4
    txn(log, 2, 0, 0)  # 5-6, producer 2's
    txn(log, 1, 0, 2)  # 7-8
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    assert marker(log, 1, 0, True) == 9
    # the marker is not replicated yet: the transaction is not decided for readers
    assert log.last_stable_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 5
    assert marker(log, 2, 0, False) == 10
    log.update_high_watermark(10)  # below the marker: still undecided
    assert log.last_stable_offset == 5
    log.update_high_watermark(11)
    assert log.last_stable_offset == 11 == log.high_watermark
    # never above the high watermark
    plain(log)
    assert log.last_stable_offset == 11


def test_aborted_transactions_are_indexed_and_collected(open_log):
    log = open_log()
    txn(log, 1, 0, 0)  # 0-1
    txn(log, 2, 0, 0)  # 2-3
    marker(log, 1, 0, False)  # 4: producer 1 aborts while producer 2's transaction is open
    marker(log, 2, 0, True)  # 5
    txn(log, 3, 0, 0)  # 6-7
    marker(log, 3, 0, False)  # 8
    log.update_high_watermark(log.log_end_offset)
    seg = log.active_segment
    assert seg.txn_index.entries == [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 6, 8, 9)]
    raw = (log.directory / "00000000000000000000.txnindex").read_bytes()
    assert raw == struct.pack(">hqqqq", 0, 1, 0, 4, 2) + struct.pack(">hqqqq", 0, 3, 6, 8, 9)
    assert log.collect_aborted_transactions(0, 9) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 6, 8, 9)]
    assert log.collect_aborted_transactions(5, 9) == [AbortedTxn(3, 6, 8, 9)]
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 4, 2)]


def test_marker_epoch_checks(open_log):
    log = open_log()
    txn(log, 1, 3, 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(1, 2, True, 0, now_ms=NOW)
    marker(log, 1, 3, True, coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(1, 3, True, 3, now_ms=NOW)
    # a marker with a newer epoch bumps the producer's: its old epoch is fenced
    marker(log, 1, 5, False, coordinator_epoch=4)
    with pytest.raises(InvalidProducerEpochError):
        txn(log, 1, 3, 2)
    assert log.producer_state.producers[1].producer_epoch == 5


def test_non_transactional_write_during_a_transaction_is_refused(open_log):
    log = open_log()
    txn(log, 1, 0, 0)
    with pytest.raises(InvalidTxnStateError):
        log.append(batch(1, producer_id=1, producer_epoch=0, base_sequence=2), now_ms=NOW)
    marker(log, 1, 0, True)
    assert log.append(batch(1, producer_id=1, producer_epoch=0, base_sequence=2), now_ms=NOW).first_offset == 3


def test_restart_restores_ongoing_transactions_from_the_snapshot(tmp_path, open_log):
    log = open_log()
    txn(log, 1, 0, 0)  # 0-1, aborted below
    txn(log, 2, 0, 0)  # 2-3, still open at the restart
    marker(log, 1, 0, False)  # 4
    log.update_high_watermark(log.log_end_offset)
    log.close()
    [path] = list_snapshots(log.directory).values()
    entries = read_snapshot(path)
    assert {(e.producer_id, e.current_txn_first_offset) for e in entries} == {(1, -1), (2, 2)}
    reopened = open_log(clean_shutdown=True, high_watermark=5)
    assert reopened.last_stable_offset == 2
    assert reopened.producer_state.ongoing_txns == {2: 2}
    assert reopened.collect_aborted_transactions(0, 5) == [AbortedTxn(1, 0, 4, 2)]
    marker(reopened, 2, 0, True)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 6


def test_recovery_without_snapshot_rebuilds_transactions_and_the_index(tmp_path, open_log):
    log = open_log()
    txn(log, 1, 0, 0)
    txn(log, 2, 0, 0)
    marker(log, 1, 0, False)
    log.flush()
    log.close(flush=False)  # a crash: no snapshot, and the .txnindex lost too
    for path in list_snapshots(log.directory).values():
        path.unlink()
    (log.directory / "00000000000000000000.txnindex").unlink()
    reopened = open_log(high_watermark=5)
    assert reopened.producer_state.ongoing_txns == {2: 2}
    assert reopened.last_stable_offset == 2
    assert reopened.collect_aborted_transactions(0, 5) == [AbortedTxn(1, 0, 4, 2)]


def test_truncation_reopens_a_transaction_whose_marker_is_cut(open_log):
    log = open_log()
    txn(log, 1, 0, 0)
    marker(log, 1, 0, False)  # 2
    assert log.active_segment.txn_index.entries
    log.truncate_to(2)
    assert log.active_segment.txn_index.entries == []
    assert not (log.directory / "00000000000000000000.txnindex").exists()
    log.update_high_watermark(2)
    assert log.last_stable_offset == 0


def test_follower_append_tracks_markers(open_log, tmp_path):
    leader = open_log()
    txn(leader, 1, 0, 0)
    marker(leader, 1, 0, False)
    data = leader.read(0, 1 << 20)
    from tidemark.log import UnifiedLog
    follower = UnifiedLog.open(tmp_path / "follower-0", LogConfig(), now_ms=NOW)
    try:
        follower.append_as_follower(data, now_ms=NOW)
        assert follower.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
        assert follower.producer_state.ongoing_txns == {}
    finally:
        follower.close()


def test_producers_with_an_open_transaction_never_expire(open_log):
    log = open_log()
    txn(log, 1, 0, 0)
    log.append(batch(1, producer_id=2, producer_epoch=0, base_sequence=0), now_ms=NOW)
    assert log.producer_state.remove_expired(NOW + 10 * 86_400_000) == 1
    assert set(log.producer_state.producers) == {1}


def test_follower_append_split_at_a_roll_snapshots_the_batches_before_it(open_log, tmp_path):
    """A fetch response larger than segment.bytes is written in parts, rolling a segment between
    them; the producer snapshot taken at that roll holds the batches of the parts before it (a
    transaction opened there is still open after a restart that loads that snapshot)."""
    from tidemark.log import UnifiedLog
    leader = open_log()
    txn(leader, 1, 0, 0)  # 0-1: opens the transaction, in the first part
    plain(leader, 3)  # 2-4
    data = leader.read(0, 1 << 20)
    [(_, first), (second_pos, _)] = list(iter_batches(data))
    config = LogConfig(segment_bytes=second_pos + 10)  # the second batch does not fit beside the first
    follower = UnifiedLog.open(tmp_path / "follower-0", config, now_ms=NOW)
    follower.append_as_follower(data, now_ms=NOW)
    assert [seg.base_offset for seg in follower.segments] == [0, 2]
    follower.flush()  # writes the snapshot taken at the roll, at offset 2
    follower.close(flush=False)  # a crash: no snapshot at the log end
    assert sorted(list_snapshots(tmp_path / "follower-0")) == [2]
    reopened = UnifiedLog.open(tmp_path / "follower-0", config, recovery_point=5, high_watermark=5, now_ms=NOW)
    try:
        assert reopened.producer_state.ongoing_txns == {0: 1}
        assert reopened.last_stable_offset == 0
    finally:
        reopened.close()
