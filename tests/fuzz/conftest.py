"""The fuzz suite's live broker and the checks every fuzz module ends with.

Each module gets its own broker on a free loopback port. Reads are bounded by a generous
socket timeout: a broker that stops answering fails the test instead of hanging it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import BrokerProcess
from tests.fuzz.wire import Conn, canary_ok

# CI: few examples, derandomized so a failure reproduces exactly. Locally, more and random:
#   TIDEMARK_FUZZ_EXAMPLES=2000 TIDEMARK_FUZZ_RANDOM=1 pytest tests/fuzz
EXAMPLES = int(os.environ.get("TIDEMARK_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("TIDEMARK_FUZZ_RANDOM") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

# No initial rebalance delay: a fuzzed JoinGroup completes at once instead of waiting 3 s.
FUZZ_BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
                        "group.max.session.timeout.ms": "30000"}


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data", FUZZ_BROKER_SETTINGS).start()
    yield process
    try:
        process.stop()
    finally:
        process.kill()


def rss_mib(process: BrokerProcess) -> float:
    assert process.process is not None
    with open(f"/proc/{process.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS for the broker process")


def assert_broker_survived(process: BrokerProcess, capsys: pytest.CaptureFixture[str] | None = None) -> float:
    """The broker process is alive and answers a fresh connection; returns its RSS in MiB."""
    assert process.process is not None and process.process.poll() is None, process.log_text()[-4000:]
    assert canary_ok(process.bootstrap)
    rss = rss_mib(process)
    message = f"broker RSS after fuzzing: {rss:.1f} MiB"
    if capsys is not None:
        with capsys.disabled():
            print(f"\n{message}")
    # Not a timing assertion: a runaway buffer (a lying length prefix held in memory) shows as GiBs.
    assert rss < 1024, message
    return rss


__all__ = ("FUZZ", "Conn", "assert_broker_survived", "fuzz_broker", "rss_mib")
