"""The log cleaner and transactions (KIP-98): never past the last stable offset, aborted
transactions' records removed (and never shadowing a committed value), committed ones compacted
by key, markers kept while their transaction has data and then until the delete horizon, the
.txnindex keeping only aborted transactions with data left, and a reload of the cleaned log
giving the same LSO, aborted transactions and producer epochs."""

from __future__ import annotations

import time

from tidemark.log import UnifiedLog
from tidemark.log.cleaner import Cleaner, log_to_clean
from tidemark.log.producer_snapshot import list_snapshots
from tidemark.records import build_batch, decode_records, iter_batches

from .conftest import NOW
from .test_cleaner import DAY, compact_config

PAD = b"x" * 1900


class Writer:
    """Appends to a compacted log as clients and the coordinator do, the high watermark
    following the log end."""

    def __init__(self, log: UnifiedLog):
        self.log = log
        self.seq: dict[tuple[int, int], int] = {}

    def _hw(self) -> None:
        self.log.update_high_watermark(self.log.log_end_offset)

    def plain(self, *records) -> int:
        info = self.log.append(build_batch([(k, v, (), NOW) for k, v in records]), now_ms=NOW)
        self._hw()
        return info.first_offset

    def txn(self, pid: int, *records, epoch: int = 0, sequenced: bool = True) -> int:
        """sequenced=False: as the group coordinator writes a TxnOffsetCommit (no sequence)."""
        seq = self.seq.get((pid, epoch), 0) if sequenced else -1
        info = self.log.append(build_batch([(k, v, (), NOW) for k, v in records], producer_id=pid,
                                           producer_epoch=epoch, base_sequence=seq, is_transactional=True),
                               now_ms=NOW)
        if sequenced:
            self.seq[(pid, epoch)] = seq + len(records)
        self._hw()
        return info.first_offset

    def end(self, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        info, _ = self.log.append_marker(pid, epoch, commit, coordinator_epoch, now_ms=NOW)
        self._hw()
        return info.first_offset

    def roll(self) -> None:
        """A record that fills a segment of its own: what follows starts another segment."""
        self.plain((b"pad", PAD))


def batches(log: UnifiedLog) -> list:
    """(header, records) of every batch in the log."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for pos, h in iter_batches(data):
            if h.next_offset > offset:
                out.append((h, decode_records(data, pos)))
            offset = h.next_offset
    return out


def data_records(log: UnifiedLog) -> dict[int, tuple]:
    return {r.offset: (r.key, r.value) for h, recs in batches(log) if not h.is_control for r in recs}


def markers(log: UnifiedLog) -> list[int]:
    return [h.base_offset for h, _ in batches(log) if h.is_control]


def all_aborted(log: UnifiedLog) -> list:
    return [e for seg in log.segments for e in seg.txn_index.entries]


def producer_view(log: UnifiedLog) -> dict:
    ps = log.producer_state
    return {pid: (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_seq)
            for pid, e in ps.producers.items()}


def now() -> int:
    return int(time.time() * 1000)


def test_dirty_range_ends_before_an_open_transaction(open_log):
    log = open_log(compact_config())
    w = Writer(log)
    w.plain((b"a", b"1"))
    w.roll()
    first = w.txn(7, (b"b", b"open"))  # never decided
    w.roll()
    w.roll()
    assert log.last_stable_offset == first < log.high_watermark
    seg_of_txn = max(s.base_offset for s in log.segments if s.base_offset <= first)
    ltc = log_to_clean(("t", 0), log, None, NOW)
    assert ltc.first_uncleanable_offset <= seg_of_txn < log.active_segment.base_offset
    end, _ = Cleaner().clean(log, 0)
    assert end <= seg_of_txn
    assert data_records(log)[first] == (b"b", b"open")


def test_aborted_records_are_removed_and_committed_ones_compacted(open_log):
    log = open_log(compact_config())
    w = Writer(log)
    w.plain((b"a", b"plain-1"), (b"c", b"plain-1"))
    aborted_at = w.txn(1, (b"a", b"aborted"), (b"b", b"aborted"))
    w.txn(2, (b"c", b"committed-1"))
    w.end(1, commit=False)
    w.txn(2, (b"c", b"committed-2"), (b"d", b"committed"))
    w.end(2, commit=True)
    w.roll()
    w.roll()
    before = data_records(log)
    end, stats = Cleaner(clock=now).clean(log, 0)
    assert end == log.active_segment.base_offset
    after = data_records(log)
    latest = {k: v for _, (k, v) in sorted(after.items())}
    assert latest == {b"a": b"plain-1", b"c": b"committed-2", b"d": b"committed", b"pad": PAD}
    assert not [o for o, (_, v) in after.items() if v == b"aborted"]
    assert all(before[o] == rec for o, rec in after.items())  # kept records keep their offsets
    # the aborted transaction's entry stays: its marker, with data read this time, is kept
    assert [e.first_offset for e in all_aborted(log)] == [aborted_at]


def test_aborted_record_does_not_shadow_an_older_committed_value(open_log):
    log = open_log(compact_config())
    w = Writer(log)
    committed_at = w.plain((b"k", b"committed"))
    w.roll()
    w.txn(1, (b"k", b"aborted"))
    w.end(1, commit=False)
    w.roll()
    w.roll()
    Cleaner(clock=now).clean(log, 0)
    assert data_records(log)[committed_at] == (b"k", b"committed")
    assert [v for k, v in data_records(log).values() if k == b"k"] == [b"committed"]


def test_markers_stay_while_their_data_does_then_until_the_delete_horizon(open_log):
    log = open_log(compact_config())
    w = Writer(log)
    w.txn(1, (b"a", b"aborted"))
    abort_marker = w.end(1, commit=False)
    w.txn(1, (b"b", b"1"))
    commit_marker = w.end(1, commit=True)
    w.txn(1, (b"b", b"2"))  # producer 1's last transaction: its marker is the producer's last
    last_marker = w.end(1, commit=True)
    w.roll()
    w.plain((b"b", b"3"))  # shadows every committed b
    w.roll()
    w.roll()
    real_now = now()
    Cleaner(clock=lambda: real_now).clean(log, 0)
    # data read in this cleaning: every marker stays, and the aborted transaction's entry
    assert markers(log) == [abort_marker, commit_marker, last_marker]
    assert [e.last_offset for e in all_aborted(log)] == [abort_marker]
    assert b"aborted" not in [v for _, v in data_records(log).values()]
    # no data left, but within delete.retention.ms of the segment: kept, no longer indexed
    Cleaner(clock=lambda: real_now).clean(log, 0)
    assert markers(log) == [abort_marker, commit_marker, last_marker]
    assert all_aborted(log) == []
    # past the horizon: removed, except the producer's last marker (it carries its epochs),
    # which is its last data batch too (kept, empty, for its sequence)
    Cleaner(clock=lambda: real_now + DAY + 60_000).clean(log, 0)
    assert markers(log) == [last_marker]


def test_a_producers_last_batch_kept_empty_keeps_its_aborted_transaction(open_log):
    log = open_log(compact_config())
    w = Writer(log)
    first = w.txn(1, (b"a", b"aborted"))
    marker = w.end(1, commit=False)
    w.roll()
    w.roll()
    real_now = now()
    for clock in (real_now, real_now + DAY + 60_000):
        Cleaner(clock=lambda: clock).clean(log, 0)
        # the batch stays, empty (producer 1's sequence), so its marker and entry stay too:
        # a reload scanning the log finds the transaction whole
        assert [(h.base_offset, len(recs)) for h, recs in batches(log) if h.producer_id == 1] == [(first, 0),
                                                                                                    (marker, 1)]
        assert [(e.first_offset, e.last_offset) for e in all_aborted(log)] == [(first, marker)]


def _reload(log: UnifiedLog, *, drop_snapshots: bool) -> UnifiedLog:
    hw = log.high_watermark
    directory = log.directory
    log.close()
    if drop_snapshots:  # a reload that rebuilds producer state by scanning the whole log
        for path in list_snapshots(directory).values():
            path.unlink()
    log = UnifiedLog.open(directory, compact_config(), now_ms=NOW)
    log.update_high_watermark(hw)
    return log


def _fetch_view(log: UnifiedLog) -> tuple:
    """What read_committed fetches see: the LSO and the aborted transactions from each offset."""
    lso = log.last_stable_offset
    aborted = {o: log.collect_aborted_transactions(o, lso) for o in range(log.log_start_offset, lso)}
    return lso, {o: [(e.producer_id, e.last_offset) for e in txns] for o, txns in aborted.items()}


def read_committed(log: UnifiedLog) -> dict:
    """The latest value per key a read_committed consumer sees: below the LSO, without the
    batches the aborted transactions fetches return cover (each producer's from its first
    offset to its marker)."""
    lso = log.last_stable_offset
    aborted = log.collect_aborted_transactions(log.log_start_offset, lso)
    out = {}
    for h, recs in batches(log):
        if h.is_control or h.base_offset >= lso:
            continue
        if h.is_transactional and any(e.producer_id == h.producer_id and e.first_offset <= h.base_offset
                                      <= e.last_offset for e in aborted):
            continue
        for r in recs:
            out[r.key] = r.value
    return out


def _mixed_log(w: Writer) -> None:
    w.txn(1, (b"a", b"aborted-1"))
    w.txn(2, (b"b", b"committed"))
    w.end(1, commit=False, coordinator_epoch=3)
    w.txn(1, (b"a", b"aborted-2"), epoch=1)  # a new epoch (fenced), then aborted
    w.end(2, commit=True, coordinator_epoch=3)
    w.end(1, commit=False, epoch=2, coordinator_epoch=4)  # the coordinator's abort bumps the epoch
    w.txn(5, (b"o", b"offset-1"), sequenced=False)  # transactional offset commits
    w.end(5, commit=True, epoch=1, coordinator_epoch=7)
    w.plain((b"o", b"offset-2"))  # shadows them: only the marker tells producer 5's epochs
    w.roll()
    w.txn(3, (b"c", b"open"))  # stays open: the LSO
    w.roll()
    w.roll()


def test_reload_of_the_cleaned_log_gives_the_same_lso_aborted_transactions_and_epochs(tmp_path):
    for drop_snapshots in (False, True):
        log = UnifiedLog.open(tmp_path / f"t-{int(drop_snapshots)}", compact_config(), now_ms=NOW)
        try:
            w = Writer(log)
            _mixed_log(w)
            lso, producers, visible = log.last_stable_offset, producer_view(log), read_committed(log)
            assert visible == {b"b": b"committed", b"o": b"offset-2", b"pad": PAD}
            real_now = now()
            for clock in (real_now, real_now, real_now + DAY + 60_000):
                Cleaner(clock=lambda: clock).clean(log, 0)
                view = _fetch_view(log)
                assert (view[0], producer_view(log), read_committed(log)) == (lso, producers, visible)
                log = _reload(log, drop_snapshots=drop_snapshots)
                assert _fetch_view(log) == view
                assert producer_view(log) == producers
            assert b"aborted-1" not in [v for _, v in data_records(log).values()]
        finally:
            log.close()


def test_a_rescan_meeting_a_kept_aborted_transaction_again_does_not_fail(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", compact_config(), now_ms=NOW)
    try:
        w = Writer(log)
        w.txn(9, (b"x", b"open-then-aborted"))  # ongoing while 1 aborts: 1's entry has LSO 0
        w.txn(1, (b"a", b"aborted"))
        w.txn(1, (b"b", b"aborted"))  # producer 1's last batch: kept, empty
        w.end(1, commit=False)
        w.end(9, commit=False)
        w.roll()
        w.roll()
        Cleaner(clock=now).clean(log, 0)
        kept = all_aborted(log)
        assert [e.producer_id for e in kept] == [1, 9]
        # the scan finds producer 1's transaction starting at its kept batch, 9's still open then
        log = _reload(log, drop_snapshots=True)
        assert all_aborted(log) == kept
    finally:
        log.close()
