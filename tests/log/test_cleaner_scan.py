"""The cleaner's record scans against simple per-record references, on random data:
records.map_key_offsets (the offset map) and records.latest_record_ranges (what a partly
surviving batch keeps) against decode_records, and a whole cleaning, which keeps or drops most
batches without reading their records twice, against the same cleaning deciding every record
of every batch by walking it, byte for byte (segments, indexes, transaction indexes), on logs
with overwritten keys, tombstones, committed and aborted transactions and their markers."""

from __future__ import annotations

import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.log import UnifiedLog
from tidemark.log.cleaner import Cleaner
from tidemark.records import (
    CorruptRecordError,
    build_batch,
    decode_records,
    latest_record_ranges,
    map_key_offsets,
    records_section,
)
from tidemark.records.compression import CompressionType

from .conftest import NOW
from .test_cleaner import DAY, compact_config, read_all
from .test_cleaner_txn import Writer, all_aborted

keys = st.one_of(st.none(), st.sampled_from([b"", b"k1", b"k2", b"k3", b"key-" + b"x" * 70, b"y" * 200]))
values = st.one_of(st.none(), st.binary(max_size=3), st.binary(min_size=60, max_size=9000))
headers = st.lists(st.tuples(st.sampled_from(["h", "trace"]), st.one_of(st.none(), st.binary(max_size=4))),
                   max_size=2)
record = st.tuples(keys, values, headers, st.integers(NOW - 100_000, NOW + 100_000))
codecs = st.sampled_from([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP])


def _offsets_of(batch: bytes) -> tuple[dict, int, bool]:
    """The reference: every record decoded; the last offset of each key."""
    offsets = {}
    keyed = 0
    for r in decode_records(batch):
        if r.key is not None:
            offsets[r.key] = r.offset
            keyed += 1
    return offsets, keyed, any(r.value is None for r in decode_records(batch))


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=90), codec=codecs, base=st.integers(0, 1 << 40),
       known=st.dictionaries(st.sampled_from([b"k1", b"k9"]), st.integers(0, 10)))
def test_map_key_offsets_is_decoding_every_record(records, codec, base, known):
    batch = build_batch(records, base_offset=base, compression=codec)
    offsets = dict(known)  # keys already mapped from earlier batches: later offsets replace them
    want, keyed, tombstone = _offsets_of(batch)
    assert map_key_offsets(batch, 0, offsets) == (keyed, tombstone)
    assert offsets == {**known, **want}


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=90), codec=codecs, retain=st.booleans(), data=st.data())
def test_latest_record_ranges_keeps_exactly_the_latest_records(records, codec, retain, data):
    batch = build_batch(records, base_offset=1000, compression=codec)
    decoded = decode_records(batch)
    # the map as a cleaning leaves it: each key's last offset, here or (overwritten) later
    offsets = {r.key: r.offset for r in decoded if r.key is not None}
    for key in data.draw(st.lists(st.sampled_from(sorted(offsets)), unique=True)) if offsets else ():
        offsets[key] = 5000
    h, section, first, last = records_section(batch)
    ranges, kept, max_ts = latest_record_ranges(section, first, last, h.records_count, h.base_offset, offsets,
                                                retain)
    want = [r for r in decoded if r.key is not None and offsets[r.key] == r.offset and (retain or r.value is not None)]
    rebuilt = b"".join(section[s:e] for s, e in ranges)
    assert kept == len(want)
    if want:
        again = decode_records(build_batch([(r.key, r.value, r.headers, r.timestamp) for r in want]))
        assert rebuilt == b"".join(section[s:e] for s, e in _record_spans(section, first, last, h.records_count,
                                                                          {r.offset - h.base_offset for r in want}))
        assert [(r.key, r.value, r.headers) for r in again] == [(r.key, r.value, r.headers) for r in want]
        assert max_ts == max(r.timestamp for r in want) - h.base_timestamp
    else:
        assert (ranges, max_ts) == ([], None)


def _record_spans(section, first, last, count, deltas):
    from tidemark.records import walk_records
    return [(s, e) for s, e, _, _, delta, *_ in walk_records(section, count, first, last) if delta in deltas]


@pytest.mark.parametrize("damage", ["count", "length"])
def test_map_key_offsets_refuses_what_walk_records_refuses(damage):
    batch = bytearray(build_batch([(b"k%d" % i, b"v" * 70, (), NOW) for i in range(5)]))
    if damage == "count":  # says 4 records, holds 5
        batch[57:61] = (4).to_bytes(4, "big")
    else:  # the first record's length one short
        batch[61] -= 2
    with pytest.raises(CorruptRecordError):
        map_key_offsets(bytes(batch), 0, {})


# -- a whole cleaning against the per-record one ----------------------------------------------


class PerRecordCleaner(Cleaner):
    """The reference: every data batch's records walked and decided one by one."""

    @staticmethod
    def _filter_batch(h, data, offset_map, retain_deletes, must_keep, aborted, stats, survivors=None):
        return Cleaner._filter_batch(h, data, offset_map, retain_deletes, must_keep, aborted, stats, None)


small_keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e" * 80])
small_values = st.one_of(st.none(), st.sampled_from([b"1", b"22", b"v" * 100]))
pairs = st.lists(st.tuples(small_keys, small_values), min_size=1, max_size=6)
step = st.one_of(
    st.tuples(st.just("plain"), pairs, codecs),
    st.tuples(st.just("txn"), st.sampled_from([7, 8]), pairs),
    st.tuples(st.just("end"), st.sampled_from([7, 8]), st.booleans()),
    st.tuples(st.just("roll")),
)


def _write(log: UnifiedLog, steps: list) -> None:
    w = Writer(log)
    open_txns: set[int] = set()
    for s in steps:
        if s[0] == "plain":
            log.append(build_batch([(k, v, (), NOW) for k, v in s[1]], compression=s[2]), now_ms=NOW)
            w._hw()
        elif s[0] == "txn":
            w.txn(s[1], *s[2])
            open_txns.add(s[1])
        elif s[0] == "end" and s[1] in open_txns:
            w.end(s[1], commit=s[2])
            open_txns.discard(s[1])
        elif s[0] == "roll":
            w.roll()
    for pid in sorted(open_txns):  # all decided: the cleaner may reach the end
        w.end(pid, commit=False)
    w.roll()


def _files(directory) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=50), passes=st.lists(st.booleans(), min_size=1, max_size=3),
       first_dirty_at=st.integers(0, 3))
def test_cleaning_is_the_per_record_cleaning_byte_for_byte(tmp_path_factory, steps, passes, first_dirty_at):
    root = tmp_path_factory.mktemp("scan")
    log = UnifiedLog.open(root / "fast" / "t-0", compact_config(), now_ms=NOW)
    _write(log, steps)
    log.close()
    shutil.copytree(root / "fast", root / "reference")  # same bytes and modification times
    fast = UnifiedLog.open(root / "fast" / "t-0", compact_config(), now_ms=NOW)
    reference = UnifiedLog.open(root / "reference" / "t-0", compact_config(), now_ms=NOW)
    try:
        real_now = int(time.time() * 1000)
        # a checkpoint inside the log too: batches below it are walked, the others decided by the map
        start = min(first_dirty_at * 7, fast.log_end_offset)
        dirty = {"fast": start, "reference": start}
        for expire in passes:  # within delete.retention.ms, or past it (tombstones and markers go)
            clock = real_now + (2 * DAY if expire else 0)
            dirty["fast"], fast_stats = Cleaner(clock=lambda: clock).clean(fast, dirty["fast"])
            dirty["reference"], ref_stats = PerRecordCleaner(clock=lambda: clock).clean(reference, dirty["reference"])
            assert dirty["fast"] == dirty["reference"]
            assert (fast_stats.records_read, fast_stats.records_written) == (ref_stats.records_read,
                                                                            ref_stats.records_written)
            assert _files(fast.directory) == _files(reference.directory)
            assert read_all(fast) == read_all(reference)
            assert all_aborted(fast) == all_aborted(reference)
    finally:
        fast.close()
        reference.close()
