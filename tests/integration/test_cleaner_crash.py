"""SIGKILL the broker at random points while the cleaner compacts the offsets topic: every
restart reads the same latest committed offset for every key."""

from __future__ import annotations

import random
import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.coordinator.partitioner import partition_for
from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value

GROUP, TOPIC, KEYS, RECORDS = "crashy", "t", 1000, 200_000
BASE = {"offsets.topic.num.partitions": "5"}


def _fetch_all(bootstrap: str) -> dict[int, int]:
    with RawClient(bootstrap) as client:
        deadline = time.monotonic() + 60
        while True:
            response = client.request(9, 7, {"group_id": GROUP, "require_stable": False, "topics": None})
            if response.error_code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert response.error_code == ErrorCode.none
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


def test_sigkill_while_cleaning_never_changes_the_latest_offsets(make_broker):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    broker = make_broker(BASE).start()
    with RawClient(broker.bootstrap) as client:  # creates the offsets topic
        client.request(10, 4, {"key_type": 0, "coordinator_keys": [GROUP]})
    assert broker.stop() == 0

    # A dirty offsets partition: 200,000 commits of 1,000 keys in 1 MB segments.
    log = UnifiedLog.open(broker.data_dir / f"__consumer_offsets-{partition_for(GROUP, 5)}",
                   LogConfig(segment_bytes=1 << 20, cleanup_policy="compact"), clean_shutdown=True)
    keys = [encode_key(OffsetCommitKey(GROUP, TOPIC, p)) for p in range(KEYS)]
    for start in range(0, RECORDS, 2000):
        log.append(build_batch([(keys[i % KEYS], encode_offset_commit_value(
            OffsetCommitValue(offset=i, commit_timestamp=1)), (), 1) for i in range(start, start + 2000)]), now_ms=1)
    log.close()
    expected = {p: RECORDS - KEYS + p for p in range(KEYS)}

    cleaning = {**BASE, "log.cleaner.backoff.ms": "20"}
    interrupted = 0
    for round_ in range(4):
        process = make_broker(cleaning, data_dir=broker.data_dir, port=broker.port)
        events = process.log_text().count('"log_cleaning_started"') + 1  # the one this start begins
        process.start()
        deadline = time.monotonic() + 20
        while process.log_text().count('"log_cleaning_started"') < events and time.monotonic() < deadline:
            time.sleep(0.005)
        if process.log_text().count('"log_cleaning_started"') < events:
            process.kill()
            break  # the log is clean: nothing left to interrupt
        time.sleep(rng.uniform(0.0, 0.4))  # somewhere in the copy, the swap, or just after
        finished = process.log_text().count('"log_cleaned"')
        process.kill()
        interrupted += process.log_text().count('"log_cleaning_started"') > finished
        checker = make_broker({**BASE, "log.cleaner.enable": "false"}, data_dir=broker.data_dir,
                              port=broker.port).start()
        assert _fetch_all(checker.bootstrap) == expected, f"round {round_}, seed {seed}"
        # Recovery on open finished or discarded the interrupted swap: no temporary files remain.
        assert not [p.name for p in broker.data_dir.rglob("*") if p.suffix in (".cleaned", ".swap")]
        checker.kill()
    assert interrupted >= 1, f"no kill landed inside a cleaning (seed {seed})"
