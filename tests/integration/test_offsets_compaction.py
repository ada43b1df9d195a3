"""The log cleaner compacts the offsets topic under a running broker; nothing committed changes."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.coordinator.partitioner import partition_for
from tidemark.records import iter_batches, iter_key_values
from tidemark.wire.api_keys import ApiKey

SETTINGS = {"offsets.topic.num.partitions": "5", "offsets.topic.segment.bytes": "65536",
            "log.cleaner.backoff.ms": "200"}
GROUP, TOPIC, KEYS, ROUNDS = "compacted", "busy", 100, 200


def _records_below_active(partition_dir) -> int:
    """Records in every segment but the active (last) one: what the cleaner may compact."""
    count = 0
    for segment in sorted(partition_dir.glob("*.log"))[:-1]:
        data = segment.read_bytes()
        for position, _ in iter_batches(data, validate=False):
            count += sum(1 for _ in iter_key_values(data, position))
    return count


def _commit_round(client: RawClient, value: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        response = client.request(ApiKey.OFFSET_COMMIT, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": value * 1000 + p, "committed_leader_epoch": -1,
                 "committed_metadata": None} for p in range(KEYS)]}]})
        codes = {p.error_code for t in response.topics for p in t.partitions}
        if codes != {ErrorCode.coordinator_load_in_progress} or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # the offsets topic was just created and is loading
    assert codes == {ErrorCode.none}


def _fetch_all(client: RawClient) -> dict[int, int]:
    deadline = time.monotonic() + 30
    while True:
        response = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "require_stable": False, "topics": None})
        if response.error_code == ErrorCode.none or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # the offsets partition is loading
    assert response.error_code == ErrorCode.none
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


def test_cleaner_compacts_the_offsets_topic_and_keeps_the_latest_commits(make_broker):
    broker = make_broker(SETTINGS).start()
    partition_dir = broker.data_dir / f"__consumer_offsets-{partition_for(GROUP, 5)}"
    with RawClient(broker.bootstrap) as client:
        client.create_topic(TOPIC, partitions=KEYS)
        for value in range(ROUNDS):
            _commit_round(client, value)
        # 20,000 commits of 100 keys: once cleaned, the closed segments hold each key at most once.
        deadline = time.monotonic() + 60
        while _records_below_active(partition_dir) > KEYS and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(list(partition_dir.glob("*.log"))) >= 2, "the offsets partition never rolled a segment"
        remaining = _records_below_active(partition_dir)
        assert remaining <= KEYS, f"{remaining} records left below the active segment after cleaning"
        expected = {p: (ROUNDS - 1) * 1000 + p for p in range(KEYS)}
        assert _fetch_all(client) == expected
    broker.stop()
    restarted = make_broker(SETTINGS, data_dir=broker.data_dir, port=broker.port).start()
    with RawClient(restarted.bootstrap) as client:
        assert _fetch_all(client) == expected  # the compacted log loads to the same offsets
    restarted.stop()
