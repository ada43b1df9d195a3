"""The storage contract: what the broker and the coordinator rely on from a partition log,
as scenario functions run against every engine (the real UnifiedLog on files and the coordinator
tests' in-memory log). An engine that disagrees with a scenario is wrong, not the scenario."""

from __future__ import annotations

import pytest

from tests.coordinator.memory_log import InMemoryLog
from tidemark.log import LogConfig, OffsetOutOfRangeError, UnifiedLog
from tidemark.records import decode_records, iter_batches

from .conftest import NOW, batch

DAY_MS = 86_400_000


def _batch_bytes() -> int:
    return len(batch(3))


def _config(**kw) -> LogConfig:
    # segment.bytes of one 3-record batch: each batch is its own segment, as each batch of the
    # in-memory log is its own unit of retention.
    return LogConfig(segment_bytes=_batch_bytes(), **kw)


@pytest.fixture(params=["unified", "memory"])
def engine(request, tmp_path):
    opened = []

    def make(config: LogConfig):
        if request.param == "memory":
            return InMemoryLog(config)
        log = UnifiedLog.open(tmp_path / f"t-{len(opened)}", config, now_ms=NOW)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def offsets(data: bytes) -> list[int]:
    return [r.offset for pos, _ in iter_batches(data) for r in decode_records(data, pos)]


def filled(make, config=None, *, timestamps=(NOW, NOW, NOW)):
    log = make(config or _config())
    for ts in timestamps:
        log.append(batch(3, ts=ts), now_ms=NOW)
    return log


def test_append_assigns_consecutive_offsets_from_the_log_end(engine):
    log = engine(_config())
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    infos = [log.append(batch(n), now_ms=NOW) for n in (2, 1, 3)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 1), (2, 2), (3, 5)]
    assert log.log_end_offset == 6


def read_all(log, offset: int) -> list[int]:
    """Every offset from `offset` on: a read may stop early (Kafka reads one segment at a
    time), so callers read again from where the last batch ended."""
    out: list[int] = []
    while offset < log.log_end_offset:
        got = offsets(log.read(offset, 1 << 20))
        assert got, offset  # never empty before the log end
        out += got
        offset = got[-1] + 1
    return out


def test_read_returns_whole_batches_from_the_one_holding_the_offset(engine):
    log = filled(engine)
    assert read_all(log, 0) == list(range(9))
    assert offsets(log.read(4, 1 << 20))[:3] == [3, 4, 5]  # from the start of its batch
    assert read_all(log, 4) == list(range(3, 9))
    assert log.read(9, 1 << 20) == b""  # the log end: nothing yet, not an error


def test_reads_outside_the_log_are_offset_out_of_range(engine):
    log = filled(engine)
    for offset in (-1, 10):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset, 1 << 20)


def test_truncated_reads_stop_at_a_batch_boundary(engine):
    log = filled(engine)
    size = _batch_bytes()
    assert offsets(log.read(0, size + size // 2)) == [0, 1, 2]
    assert offsets(log.read(0, 1)) == [0, 1, 2]  # at least one batch, however small max_bytes is
    assert log.read(0, 1, min_one_batch=False) == b""


def test_high_watermark_bounds_reads_and_stays_within_the_log(engine):
    log = filled(engine)
    assert log.update_high_watermark(4) == 4
    assert offsets(log.read(0, 1 << 20, upper_bound=log.high_watermark)) == [0, 1, 2]  # no batch crossing it
    assert log.read(3, 1 << 20, upper_bound=log.high_watermark) == b""
    assert log.update_high_watermark(100) == 9  # never past the log end
    assert log.update_high_watermark(-5) == 0  # nor below the log start


def test_retention_moves_the_log_start_up_below_the_high_watermark_only(engine):
    old = NOW - 2 * DAY_MS
    log = filled(engine, _config(retention_ms=DAY_MS), timestamps=(old, old, old, NOW))
    log.update_high_watermark(3)
    assert log.delete_retention(NOW) == 1  # the second old batch reaches past the high watermark
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1 << 20)
    assert offsets(log.read(3, 1 << 20))[:3] == [3, 4, 5]
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention(NOW) == 2
    assert (log.log_start_offset, log.log_end_offset) == (9, 12)
    assert read_all(log, log.log_start_offset) == [9, 10, 11]


def test_retention_never_empties_the_log(engine):
    old = NOW - 2 * DAY_MS
    log = filled(engine, _config(retention_ms=DAY_MS), timestamps=(old, old))
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention(NOW) == 1  # the last batch stays (Kafka keeps the active segment)
    assert (log.log_start_offset, log.log_end_offset) == (3, 6)
    assert log.append(batch(1), now_ms=NOW).first_offset == 6
