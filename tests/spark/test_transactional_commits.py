"""The offsets jobs over a log with transactional offset commits (read from files): a commit
counts once its transaction's COMMIT marker follows it, as loading replays it."""

from __future__ import annotations


from tidemark.records import build_batch
from tidemark.records.control import build_marker_batch
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value
from tidemark.spark.jobs.offsets_snapshot import offsets_snapshot

T = 1_700_000_000_000


def _commit(group: str, offset: int) -> tuple:
    return (encode_key(OffsetCommitKey(group, "orders", 0)),
            encode_offset_commit_value(OffsetCommitValue(offset, -1, "", T, -1)), (), T)


def test_snapshot_counts_committed_transactions_only(spark, tmp_path):
    partition = tmp_path / "__consumer_offsets-0"
    partition.mkdir()
    batches = [
        build_batch([_commit("plain", 1), _commit("committed", 1), _commit("aborted", 1)], base_offset=0),
        # Producer 7 commits "committed" at 5; producer 8 "aborted" at 9, then aborts.
        build_batch([_commit("committed", 5)], base_offset=3, producer_id=7, producer_epoch=0, is_transactional=True),
        build_batch([_commit("aborted", 9)], base_offset=4, producer_id=8, producer_epoch=0, is_transactional=True),
        build_batch([_commit("plain", 2)], base_offset=5),  # non-transactional, in between
        build_marker_batch(8, 0, False, 0, T, base_offset=6),
        build_marker_batch(7, 0, True, 0, T, base_offset=7),
        # Producer 7 again: still open at the end of the log.
        build_batch([_commit("committed", 6)], base_offset=8, producer_id=7, producer_epoch=0, is_transactional=True),
    ]
    (partition / "00000000000000000000.log").write_bytes(b"".join(batches))
    records = spark.read.format("tidemark-offsets").load(str(tmp_path))
    assert {(r.group, r.committed_offset) for r in offsets_snapshot(records).collect()} == {
        ("plain", 2), ("committed", 5), ("aborted", 1)}
    markers = records.where("record_type = 'transaction_marker'").orderBy("log_offset").collect()
    assert [(m.log_offset, m.producer_id, m.transaction_result) for m in markers] == [(6, 8, "ABORT"), (7, 7, "COMMIT")]
