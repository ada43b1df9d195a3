"""SIGKILL the broker at each step of the cleaner compacting the offsets topic: every restart
reads the same latest committed offset for every key."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.coordinator.partitioner import partition_for
from tidemark.hold import HOLD_AT
from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value
from tidemark.wire.api_keys import ApiKey

GROUP, TOPIC, KEYS, RECORDS = "crashy", "t", 1000, 200_000
BASE = {"offsets.topic.num.partitions": "5"}


def _fetch_all(bootstrap: str) -> dict[int, int]:
    with RawClient(bootstrap) as client:
        deadline = time.monotonic() + 60
        while True:
            response = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "require_stable": False, "topics": None})
            if response.error_code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert response.error_code == ErrorCode.none
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


def test_sigkill_at_every_cleaning_step_never_changes_the_latest_offsets(make_broker):
    broker = make_broker(BASE).start()
    with RawClient(broker.bootstrap) as client:  # creates the offsets topic
        client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]})
    assert broker.stop() == 0

    # A dirty offsets partition: 200,000 commits in 1 MB segments, all 1,000 keys in the first
    # half, then only keys 0-499: the latest offsets of keys 500-999 sit in the first segments,
    # the ones a cleaning rewrites first.
    log = UnifiedLog.open(broker.data_dir / f"__consumer_offsets-{partition_for(GROUP, 5)}",
                   LogConfig(segment_bytes=1 << 20, cleanup_policy="compact"), clean_shutdown=True)
    keys = [encode_key(OffsetCommitKey(GROUP, TOPIC, p)) for p in range(KEYS)]
    key_of = [i % KEYS if i < RECORDS // 2 else i % (KEYS // 2) for i in range(RECORDS)]
    for start in range(0, RECORDS, 2000):
        log.append(build_batch([(keys[key_of[i]], encode_offset_commit_value(
            OffsetCommitValue(offset=i, commit_timestamp=1)), (), 1) for i in range(start, start + 2000)]), now_ms=1)
    log.close()
    expected = {key: i for i, key in enumerate(key_of)}  # the last commit of each key wins

    # Each round SIGKILLs the broker held at one named step of a cleaning (tidemark.hold): in the
    # copy, at each step of the swap, so every crash point recovery has to handle is hit.
    cleaning = {**BASE, "log.cleaner.backoff.ms": "20"}
    for point in ("cleaner_write", "swap_cleaned", "swap_swap", "swap_deleted", "swap_renamed"):
        process = make_broker(cleaning, data_dir=broker.data_dir, port=broker.port, env={HOLD_AT: point}).start()
        process.wait_for_log(f'"point": "{point}"')
        process.kill()
        checker = make_broker({**BASE, "log.cleaner.enable": "false"}, data_dir=broker.data_dir,
                              port=broker.port).start()
        assert _fetch_all(checker.bootstrap) == expected, f"killed at {point}"
        # Recovery on open finished or discarded the interrupted swap: no temporary files remain.
        assert not [p.name for p in broker.data_dir.rglob("*") if p.suffix in (".cleaned", ".swap")]
        checker.kill()
