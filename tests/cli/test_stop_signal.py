"""SIGTERM at any moment ends the broker within controlled.shutdown.timeout.ms + 5 s, and a
SIGTERM during the start is acted on at once: the start is cancelled and the broker stops
cleanly with what it has (its logs closed, the clean-shutdown marker written)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.stop_bound import CONTROLLED_SHUTDOWN_TIMEOUT_MS, STOP_BOUND_S, launch, sigterm_and_time_exit
from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic, produce_all
from tidemark.hold import HOLD_AT
from tidemark.log.manager import CLEAN_SHUTDOWN_FILE

SETTINGS = {"controlled.shutdown.timeout.ms": str(CONTROLLED_SHUTDOWN_TIMEOUT_MS)}


def test_sigterm_during_the_start_stops_the_broker_cleanly_within_the_bound(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = BrokerProcess(data_dir, SETTINGS).start()
    try:
        create_topic(first.bootstrap, "kept", 1)
        assert produce_all(first.bootstrap, "kept", [(0, b"k", b"a"), (0, b"k", b"b"), (0, b"k", b"c")]) == 3
    finally:
        assert first.stop() == 0
    # The next start holds with its logs open, before it listens: for ever, until SIGTERM.
    held = launch(BrokerProcess(data_dir, SETTINGS, env={HOLD_AT: "broker_start"}))
    try:
        held.wait_for_log('"point": "broker_start"')
        assert not (data_dir / CLEAN_SHUTDOWN_FILE).exists()  # the logs are open
        seconds, code = sigterm_and_time_exit(held)
    finally:
        held.kill()
    print(f"exited {seconds:.2f}s after SIGTERM with {code}")
    assert code == 0 and seconds <= STOP_BOUND_S, (seconds, code, held.log_text()[-3000:])
    assert "broker_start_cancelled" in held.log_text()
    assert (data_dir / CLEAN_SHUTDOWN_FILE).exists()  # the logs it had open were closed cleanly
    # And nothing was lost: the records are all there after a normal start.
    again = BrokerProcess(data_dir, SETTINGS).start()
    try:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": again.bootstrap, "group.id": "check", "enable.auto.commit": False})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition("kept", 0), timeout=15)
        finally:
            consumer.close()
        assert (low, high) == (0, 3)
    finally:
        again.stop()


def test_sigterm_when_started_exits_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        seconds, code = sigterm_and_time_exit(broker)
    finally:
        broker.kill()
    print(f"exited {seconds:.2f}s after SIGTERM with {code}")
    assert code == 0 and seconds <= STOP_BOUND_S, (seconds, code)
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()
