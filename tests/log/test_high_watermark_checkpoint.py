"""The replication-offset-checkpoint (Kafka's high watermark checkpoint): written in Kafka's
format on its interval, at every truncation and at clean shutdown, off the event loop; read at
start, where a replica's high watermark is min(checkpointed, log end), never its log end. A
broker alone with its logs starts at its durably flushed end (the recovery point)."""

from __future__ import annotations

import asyncio
import threading

from tidemark.log import LogConfig, LogManager, manager
from tidemark.log.manager import CLEAN_SHUTDOWN_FILE, REPLICATION_OFFSET_CHECKPOINT, read_checkpoint

from .conftest import NOW, batch


def _fill(m: LogManager, topic: str, partition: int, records: int, high_watermark: int):
    log = m.get_or_create(topic, partition)
    for _ in range(records):
        log.append(batch(), now_ms=NOW)
    log.update_high_watermark(high_watermark)
    return log


def _crash(m: LogManager) -> None:
    """The process dies: nothing closed cleanly, the kernel drops the directory lock."""
    m._dir_lock.release()
    for log in m.logs().values():
        log.close(flush=False)


def _record_writer_threads(monkeypatch) -> list[str]:
    """The names of the threads that write (and fsync) checkpoint files."""
    threads: list[str] = []
    real = manager.write_checkpoint
    monkeypatch.setattr(manager, "write_checkpoint",
                        lambda path, entries: (threads.append(threading.current_thread().name), real(path, entries)))
    return threads


def test_a_restarted_replica_starts_at_its_checkpointed_high_watermark_not_its_log_end(tmp_path):
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    _fill(m, "t", 0, 10, 4)
    _fill(m, "t", 1, 3, 3)
    m.get_or_create("u-v", 2)  # empty
    m.close()
    # Kafka's OffsetCheckpointFile: version 0, the count, then "topic partition offset" lines.
    assert (tmp_path / REPLICATION_OFFSET_CHECKPOINT).read_text() == "0\n3\nt 0 4\nt 1 3\nu-v 2 0\n"

    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    assert m.clean_shutdown
    t0 = m.get("t", 0)
    assert (t0.log_end_offset, t0.high_watermark) == (10, 4)
    assert m.get("t", 1).high_watermark == 3
    m.close()


def test_a_replica_without_a_checkpointed_high_watermark_starts_at_zero_and_never_past_its_end(tmp_path):
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    _fill(m, "t", 0, 5, 5)
    _fill(m, "t", 1, 5, 5)
    m.close()
    # The checkpoint lost t-0 and says more than t-1 holds (a tail lost to a power cut).
    (tmp_path / REPLICATION_OFFSET_CHECKPOINT).write_text("0\n1\nt 1 9\n")
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    assert m.get("t", 0).high_watermark == 0
    assert m.get("t", 1).high_watermark == 5
    m.close()


def test_after_a_crash_a_replica_starts_at_the_last_checkpoint(tmp_path):
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    log = _fill(m, "t", 0, 6, 2)
    m.checkpoint_high_watermarks()
    log.update_high_watermark(6)  # not checkpointed before the crash
    _crash(m)
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    assert not m.clean_shutdown
    log = m.get("t", 0)
    assert (log.log_end_offset, log.high_watermark) == (6, 2)
    m.close()


def test_a_broker_alone_restarts_at_its_flushed_end_clean_or_not(tmp_path):
    """No regression for the single broker: there the high watermark is the durably flushed
    end, which the recovery point is; the loader fsyncs what an unclean shutdown left."""
    m = LogManager(tmp_path, LogConfig())
    m.open()
    _fill(m, "t", 0, 7, 7)
    _fill(m, "t", 1, 3, 1)  # an append not yet flushed when the broker stopped
    m.close()
    m = LogManager(tmp_path, LogConfig())
    m.open()
    assert [(log.log_end_offset, log.high_watermark) for log in (m.get("t", 0), m.get("t", 1))] == [(7, 7), (3, 3)]
    _fill(m, "t", 0, 2, 7)
    _crash(m)
    m = LogManager(tmp_path, LogConfig())
    m.open()
    log = m.get("t", 0)
    assert not m.clean_shutdown
    assert (log.log_end_offset, log.recovery_point, log.high_watermark) == (9, 9, 9)
    m.close()


def test_a_truncation_checkpoints_the_lowered_high_watermark_off_the_event_loop(tmp_path, monkeypatch):
    synced_on = _record_writer_threads(monkeypatch)
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    log = _fill(m, "t", 0, 8, 8)
    m.checkpoint_high_watermarks()
    synced_on.clear()
    log.truncate_to(3)
    m.checkpoints_written()
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 3}
    assert synced_on and threading.main_thread().name not in synced_on
    _crash(m)
    m = LogManager(tmp_path, LogConfig(), replicated=True)
    m.open()
    assert m.get("t", 0).high_watermark == 3
    m.close()


def test_the_high_watermark_checkpoint_is_written_on_its_interval_off_the_event_loop(tmp_path, monkeypatch):
    synced_on = _record_writer_threads(monkeypatch)

    async def main() -> None:
        m = LogManager(tmp_path, LogConfig(), replicated=True, high_watermark_checkpoint_interval_ms=10,
                       checkpoint_interval_ms=10)
        m.open()
        _fill(m, "t", 0, 4, 2)
        m.start()
        path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
        while not path.exists() or read_checkpoint(path) != {("t", 0): 2}:
            await asyncio.sleep(0.01)
        await m.stop()
        assert synced_on and threading.current_thread().name not in synced_on
        m.close()
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_segment_rolled_after_a_truncation_waits_for_the_lowered_recovery_point(tmp_path, monkeypatch):
    """A segment rolled past a truncation must not be covered by a stale, higher recovery
    point on disk: the roll waits for the checkpoint the truncation asked for."""
    events: list[str] = []
    gate = threading.Event()
    real = manager.write_checkpoint

    def slow_write(path, entries):
        gate.wait(30)  # the disk is slow: the roll below is asked for before this write lands
        real(path, entries)
        events.append(f"written {path.name}")

    m = LogManager(tmp_path, LogConfig(segment_bytes=200), replicated=True)
    m.open()
    log = m.get_or_create("t", 0)
    for _ in range(6):
        log.append(batch(1, size=60), now_ms=NOW)
    log.flush()
    m.checkpoint()
    monkeypatch.setattr(manager, "write_checkpoint", slow_write)
    log.truncate_to(2)
    real_snapshot = log.producer_state.snapshot_at_roll
    monkeypatch.setattr(log.producer_state, "snapshot_at_roll",
                        lambda *args, **kwargs: (events.append("roll"), real_snapshot(*args, **kwargs)))
    threading.Timer(0.2, gate.set).start()
    segments = len(log.segments)
    while len(log.segments) == segments:
        log.append(batch(1, size=60), now_ms=NOW)
    assert events.index("roll") > events.index("written recovery-point-offset-checkpoint")
    gate.set()
    m.close()


def test_a_run_of_truncations_is_checkpointed_once_and_a_roll_right_after_does_not_wait_for_the_loop(
        tmp_path, monkeypatch):
    """A view change truncates many logs in one go: one write covers them all, after the run.
    A log rolling in the same run makes that write happen at once (and waits for it)."""
    written: list[dict] = []
    real = manager.write_checkpoint
    monkeypatch.setattr(manager, "write_checkpoint",
                        lambda path, entries: (written.append((path.name, dict(entries))), real(path, entries)))

    async def main() -> None:
        m = LogManager(tmp_path, LogConfig(segment_bytes=200), replicated=True)
        m.open()
        logs = [_fill(m, "t", p, 6, 6) for p in range(3)]
        m.checkpoints_written()
        written.clear()
        for log in logs:
            log.truncate_to(2)
        m.checkpoints_written()  # forces the scheduled write, as the loop would right after
        assert [name for name, _ in written].count("recovery-point-offset-checkpoint") == 1
        assert written[-1] == ("replication-offset-checkpoint", {("t", 0): 2, ("t", 1): 2, ("t", 2): 2})
        written.clear()
        logs[0].truncate_to(1)
        segments = len(logs[0].segments)
        while len(logs[0].segments) == segments:  # rolls before the loop ran the scheduled write
            logs[0].append(batch(1, size=60), now_ms=NOW)
        assert ("replication-offset-checkpoint", {("t", 0): 1, ("t", 1): 2, ("t", 2): 2}) in written
        await asyncio.sleep(0)  # the scheduled write finds nothing left to do
        assert [name for name, _ in written].count("recovery-point-offset-checkpoint") == 1
        m.close()

    asyncio.run(asyncio.wait_for(main(), 30))
