"""The offset manager over the wire: the offsets topic, error codes in Kafka's order, loading."""

from __future__ import annotations

import time

from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.cli.offsets import offsets
from tidemark.coordinator.partitioner import partition_for
from tidemark.hold import HOLD_AT, HOLD_RELEASE
from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, METADATA, HEARTBEAT, DELETE_TOPICS = 10, 8, 9, 3, 12, 20


def _commit(client, group, topic, partitions, version=8, generation=-1, member="", metadata=None):
    body = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                 "committed_metadata": metadata} for p, o in partitions]}]}
    response = client.request(OFFSET_COMMIT, version, body)
    return {p.partition_index: p.error_code for p in response.topics[0].partitions}


def _commit_once_loaded(client, group, topic, partitions):
    """`_commit`, answered again while the group's offsets partition is still loading (a client
    that commits first thing on a fresh broker gets COORDINATOR_LOAD_IN_PROGRESS and retries)."""
    for _ in range(3000):  # at least 30 s: a bound on the wait, not a margin it needs
        result = _commit(client, group, topic, partitions)
        if set(result.values()) != {ErrorCode.coordinator_load_in_progress}:
            return result
        time.sleep(0.01)
    raise AssertionError(f"{group}'s offsets partition did not load")


def _fetch(client, group, topic, partitions, require_stable=False):
    response = client.request(OFFSET_FETCH, 7, {"group_id": group, "require_stable": require_stable,
                                                "topics": [{"name": topic, "partition_indexes": partitions}]})
    return response.error_code, {p.partition_index: (p.committed_offset, p.metadata, p.error_code)
                                 for t in response.topics for p in t.partitions}


def test_offsets_topic_created_on_first_use(broker):
    with RawClient(broker.bootstrap) as client:
        response = client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["testGroup", "other"]})
        assert [(c.key, c.node_id, c.error_code) for c in response.coordinators] == [
            ("testGroup", 0, ErrorCode.none), ("other", 0, ErrorCode.none)]
        metadata = client.request(METADATA, 12, {"topics": [{"name": "__consumer_offsets", "topic_id": None}],
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        (topic,) = metadata.topics
        assert topic.is_internal and len(topic.partitions) == 50
        # "testGroup" lives on partition 49 (abs(hashCode) % 50): its commit lands in that partition's log.
        client.create_topic("tg-topic")
        assert _commit(client, "testGroup", "tg-topic", [(0, 5)]) == {0: ErrorCode.none}
    segment = broker.data_dir / "__consumer_offsets-49" / "00000000000000000000.log"
    assert segment.stat().st_size > 0
    assert partition_for("testGroup", 50) == 49


def test_commit_errors_in_kafka_order(broker):
    with RawClient(broker.bootstrap) as client:
        client.create_topic("codes", partitions=2)
        # Unknown partitions are refused one by one; metadata too long only for that partition.
        result = _commit(client, "codes-group", "codes", [(0, 1), (5, 1)])
        assert result == {0: ErrorCode.none, 5: ErrorCode.unknown_topic_or_partition}
        long_metadata = _commit(client, "codes-group", "codes", [(1, 9)], metadata="x" * 4097)
        assert long_metadata == {1: ErrorCode.offset_metadata_too_large}
        assert _commit(client, "", "codes", [(0, 1)]) == {0: ErrorCode.invalid_group_id}
        # An unknown group with a generation: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
        assert _commit(client, "nobody", "codes", [(0, 1)], version=9, generation=3, member="m") == {
            0: ErrorCode.group_id_not_found}
        assert _commit(client, "nobody", "codes", [(0, 1)], version=8, generation=3, member="m") == {
            0: ErrorCode.illegal_generation}
        # A known (simple) group: committing as a member it does not have.
        assert _commit(client, "codes-group", "codes", [(0, 2)], generation=1, member="ghost") == {
            0: ErrorCode.unknown_member_id}
        error, offsets = _fetch(client, "codes-group", "codes", [0, 1])
        assert error == ErrorCode.none
        assert offsets == {0: (1, "", ErrorCode.none), 1: (-1, "", ErrorCode.none)}
        # A group nobody committed for: -1 and no error.
        assert _fetch(client, "never", "codes", [0]) == (ErrorCode.none, {0: (-1, "", ErrorCode.none)})
        # "All topics" of a missing group is an empty list.
        response = client.request(OFFSET_FETCH, 7, {"group_id": "never", "topics": None, "require_stable": False})
        assert response.topics == ()


def test_multi_group_offset_fetch(broker):
    with RawClient(broker.bootstrap) as client:
        client.create_topic("multi")
        assert _commit_once_loaded(client, "multi-a", "multi", [(0, 11)]) == {0: ErrorCode.none}
        assert _commit_once_loaded(client, "multi-b", "multi", [(0, 22)]) == {0: ErrorCode.none}
        response = client.request(OFFSET_FETCH, 8, {"require_stable": True, "groups": [
            {"group_id": "multi-a", "topics": [{"name": "multi", "partition_indexes": [0]}]},
            {"group_id": "multi-b", "topics": None}]})
        got = {g.group_id: [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]
               for g in response.groups}
        assert got == {"multi-a": [("multi", 0, 11)], "multi-b": [("multi", 0, 22)]}


def test_deleting_a_topic_tombstones_its_offsets_so_recreating_it_starts_without_them(broker):
    group = "deleted-topic"
    with RawClient(broker.bootstrap) as client:
        client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        client.create_topic("doomed", partitions=2)
        client.create_topic("kept")
        deadline = time.monotonic() + 30
        while (committed := _commit(client, group, "doomed", [(0, 5), (1, 7)])) == {
                0: ErrorCode.coordinator_load_in_progress, 1: ErrorCode.coordinator_load_in_progress}:
            assert time.monotonic() < deadline  # the group's offsets partition is still loading
            time.sleep(0.05)
        assert committed == {0: ErrorCode.none, 1: ErrorCode.none}
        assert _commit(client, group, "kept", [(0, 3)]) == {0: ErrorCode.none}
        deleted = client.request(DELETE_TOPICS, 6, {"topics": [{"name": "doomed", "topic_id": None}],
                                                    "timeout": 10000})
        assert deleted.responses[0].error_code == ErrorCode.none
        assert client.create_topic("doomed", partitions=2).error_code == ErrorCode.none
        assert _fetch(client, group, "doomed", [0, 1]) == (ErrorCode.none, {0: (-1, "", 0), 1: (-1, "", 0)})
        assert _fetch(client, group, "kept", [0]) == (ErrorCode.none, {0: (3, "", 0)})
    # The deletion is in the offsets log (and survives a restart): a tombstone per offset.
    dumped = CliRunner().invoke(offsets, ["dump", "--data-dir", str(broker.data_dir),
                                          "--partition", str(partition_for(group, 50))], catch_exceptions=False)
    assert dumped.exit_code == 0, dumped.output
    lines = [line.split(" key: ")[1] for line in dumped.stdout.splitlines() if f'"group":"{group}"' in line]
    assert lines[-2:] == [f'{{"group":"{group}","topic":"doomed","partition":{p}}} value: <tombstone>' for p in (0, 1)]


def test_fetch_during_load_gets_load_in_progress_then_the_offsets(make_broker):
    broker = make_broker().start()
    group = "loading-group"
    with RawClient(broker.bootstrap) as client:
        client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})  # creates the topic
        client.create_topic("loaded")
    assert broker.stop() == 0

    # 1,000,000 commit records for 1,000 partitions of one group, written straight into the log.
    partition_dir = broker.data_dir / f"__consumer_offsets-{partition_for(group, 50)}"
    log = UnifiedLog.open(partition_dir, LogConfig(segment_bytes=104857600, cleanup_policy="compact"), clean_shutdown=True)
    keys = [encode_key(OffsetCommitKey(group, "loaded", p)) for p in range(1000)]
    per_batch = 5000
    for start in range(0, 1_000_000, per_batch):
        log.append(build_batch([
            (keys[i % 1000], encode_offset_commit_value(OffsetCommitValue(offset=i, commit_timestamp=1)), (), 1)
            for i in range(start, start + per_batch)]), now_ms=1)
    log.close()

    # The restarted broker holds every offsets load (tidemark.hold) after reading the log and
    # before replaying it, until the test creates the release file: the load is provably unfinished.
    release = broker.data_dir.parent / "release-offsets-load"
    restarted = make_broker(data_dir=broker.data_dir, port=broker.port,
                            env={HOLD_AT: "offsets_load", HOLD_RELEASE: str(release)}).start()
    with RawClient(restarted.bootstrap) as client:
        restarted.wait_for_log('"point": "offsets_load"', count=50)  # every partition read its log
        assert _fetch(client, group, "loaded", [0, 1, 999])[0] == ErrorCode.coordinator_load_in_progress
        assert _commit(client, group, "loaded", [(0, 1)]) == {0: ErrorCode.coordinator_load_in_progress}
        # A heartbeat during the load: Kafka answers NONE (the member is not known to be gone).
        heartbeat = {"group_id": group, "generation_id": 1, "member_id": "m", "group_instance_id": None}
        assert client.request(HEARTBEAT, 4, heartbeat).error_code == ErrorCode.none
        release.touch()
        restarted.wait_for_log('"offsets_partition_loaded"', count=50)
        error, offsets = _fetch(client, group, "loaded", [0, 1, 999])
    assert error == ErrorCode.none
    # The last record per key wins: partition p's last commit was record 999,000 + p; the commit
    # refused while loading left no trace.
    assert offsets == {p: (999_000 + p, "", ErrorCode.none) for p in (0, 1, 999)}
    restarted.stop()


def test_an_offsets_partition_that_cannot_be_loaded_answers_coordinator_not_available(make_broker):
    broker = make_broker().start()
    broken, healthy = "broken-group", "healthy-group"
    assert partition_for(broken, 50) != partition_for(healthy, 50)
    with RawClient(broker.bootstrap) as client:
        client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [broken]})  # creates the topic
        client.create_topic("unloadable")
    assert broker.stop() == 0

    # An offset commit whose value has a version no Kafka ever wrote: the partition cannot be replayed.
    log = UnifiedLog.open(broker.data_dir / f"__consumer_offsets-{partition_for(broken, 50)}",
                   LogConfig(segment_bytes=104857600, cleanup_policy="compact"), clean_shutdown=True)
    log.append(build_batch([(encode_key(OffsetCommitKey(broken, "unloadable", 0)), b"\x00\x63garbage", (), 1)]),
               now_ms=1)
    log.close()

    restarted = make_broker(data_dir=broker.data_dir, port=broker.port).start()
    restarted.wait_for_log('"offsets_load_failed"')
    restarted.wait_for_log('"offsets_partition_loaded"', count=49)  # every other partition loaded
    with RawClient(restarted.bootstrap) as client:
        # A failed partition (its load is retried with back-off) answers NOT_COORDINATOR, as Kafka's
        # coordinator runtime does for a partition that is not active; clients look it up again.
        assert _fetch(client, broken, "unloadable", [0])[0] == ErrorCode.not_coordinator
        assert _commit(client, broken, "unloadable", [(0, 3)]) == {0: ErrorCode.not_coordinator}
        # The other partitions serve as usual.
        assert _commit(client, healthy, "unloadable", [(0, 4)]) == {0: ErrorCode.none}
        assert _fetch(client, healthy, "unloadable", [0]) == (ErrorCode.none, {0: (4, "", ErrorCode.none)})
    restarted.stop()
