"""OffsetCommit v10 and OffsetFetch v10 name topics by id (KIP-848): over the wire, Kafka's answers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.raw import RawClient

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DELETE_TOPICS = 8, 9, 10, 20
LOAD_DEADLINE_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose one offsets partition (every group's) is created and loaded."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", {"offsets.topic.num.partitions": "1"}).start()
    try:
        with RawClient(process.bootstrap) as client:
            client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["any"]})
            deadline = time.monotonic() + LOAD_DEADLINE_S
            while _fetch(client, "any", None)[0] == ErrorCode.coordinator_load_in_progress:
                assert time.monotonic() < deadline, "the offsets partition never loaded"
                time.sleep(0.05)
        yield process
        process.stop()
    finally:
        process.kill()


def _commit(client, group, topic_id, partitions):
    """OffsetCommit v10 of one topic by id; returns (the answer's topic id, {partition: error})."""
    response = client.request(OFFSET_COMMIT, 10, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"}
            for p, o in partitions]}]})
    (topic,) = response.topics
    return topic.topic_id, {p.partition_index: p.error_code for p in topic.partitions}


def _fetch(client, group, topics):
    """OffsetFetch v10 of one group, `topics` a list of (topic id, partitions) or None for all;
    returns (group error, [(topic id, partition, offset, metadata, error)])."""
    asked = None if topics is None else [{"topic_id": t, "partition_indexes": ps} for t, ps in topics]
    response = client.request(OFFSET_FETCH, 10, {"require_stable": True, "groups": [
        {"group_id": group, "member_id": None, "member_epoch": -1, "topics": asked}]})
    (answer,) = response.groups
    assert answer.group_id == group
    return answer.error_code, [(t.topic_id, p.partition_index, p.committed_offset, p.metadata, p.error_code)
                               for t in answer.topics for p in t.partitions]


def _delete_topic(client, name):
    response = client.request(DELETE_TOPICS, 6, {"topics": [{"name": name, "topic_id": None}], "timeout": 10000})
    assert response.responses[0].error_code == ErrorCode.none


def test_commit_and_fetch_by_topic_id(broker):
    with RawClient(broker.bootstrap) as client:
        topic_id = client.create_topic("ids", partitions=2).topic_id
        assert isinstance(topic_id, uuid.UUID)
        assert _commit(client, "ids-group", topic_id, [(0, 7), (1, 9)]) == (
            topic_id, {0: ErrorCode.none, 1: ErrorCode.none})
        # A partition the topic does not have is still UNKNOWN_TOPIC_OR_PARTITION: the id is known.
        assert _commit(client, "ids-group", topic_id, [(5, 1)]) == (
            topic_id, {5: ErrorCode.unknown_topic_or_partition})

        assert _fetch(client, "ids-group", [(topic_id, [0, 1, 2])]) == (ErrorCode.none, [
            (topic_id, 0, 7, "m", ErrorCode.none), (topic_id, 1, 9, "m", ErrorCode.none),
            (topic_id, 2, -1, "", ErrorCode.none)])
        # The same offsets by name (v9), so both name the same committed offsets.
        by_name = client.request(OFFSET_FETCH, 9, {"require_stable": True, "groups": [
            {"group_id": "ids-group", "member_id": None, "member_epoch": -1,
             "topics": [{"name": "ids", "partition_indexes": [0, 1]}]}]})
        assert [(t.name, p.committed_offset) for t in by_name.groups[0].topics for p in t.partitions] == [
            ("ids", 7), ("ids", 9)]


def test_unknown_topic_id_is_unknown_topic_id(broker):
    with RawClient(broker.bootstrap) as client:
        known = client.create_topic("ids-known").topic_id
        unknown = uuid.uuid4()
        assert _commit(client, "unknown-ids", unknown, [(0, 3), (1, 4)]) == (
            unknown, {0: ErrorCode.unknown_topic_id, 1: ErrorCode.unknown_topic_id})
        # The zero id (kio reads it as None) names no topic either.
        assert _commit(client, "unknown-ids", None, [(0, 3)]) == (None, {0: ErrorCode.unknown_topic_id})
        # One request with both: the known topic is committed, the unknown one refused, in order.
        response = client.request(OFFSET_COMMIT, 10, {
            "group_id": "unknown-ids", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [
                {"topic_id": t, "partitions": [{"partition_index": 0, "committed_offset": 12,
                                                "committed_leader_epoch": -1, "committed_metadata": None}]}
                for t in (unknown, known)]})
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in response.topics] == [
            (unknown, [ErrorCode.unknown_topic_id]), (known, [ErrorCode.none])]

        assert _fetch(client, "unknown-ids", [(unknown, [0, 1]), (known, [0]), (None, [0])]) == (ErrorCode.none, [
            (unknown, 0, -1, "", ErrorCode.unknown_topic_id), (unknown, 1, -1, "", ErrorCode.unknown_topic_id),
            (known, 0, 12, "", ErrorCode.none), (None, 0, -1, "", ErrorCode.unknown_topic_id)])


def test_a_recreated_topic_has_a_new_id_and_the_old_one_is_unknown(broker):
    with RawClient(broker.bootstrap) as client:
        old = client.create_topic("ids-recreated").topic_id
        assert _commit(client, "recreated-group", old, [(0, 5)]) == (old, {0: ErrorCode.none})
        _delete_topic(client, "ids-recreated")
        new = client.create_topic("ids-recreated").topic_id
        assert new != old
        assert _commit(client, "recreated-group", old, [(0, 6)]) == (old, {0: ErrorCode.unknown_topic_id})
        assert _fetch(client, "recreated-group", [(old, [0])]) == (
            ErrorCode.none, [(old, 0, -1, "", ErrorCode.unknown_topic_id)])
        assert _commit(client, "recreated-group", new, [(0, 8)]) == (new, {0: ErrorCode.none})
        assert _fetch(client, "recreated-group", [(new, [0])]) == (ErrorCode.none, [(new, 0, 8, "m", ErrorCode.none)])


def test_all_topics_fetch_names_topics_by_id(broker):
    with RawClient(broker.bootstrap) as client:
        first = client.create_topic("ids-all-a", partitions=2).topic_id
        second = client.create_topic("ids-all-b").topic_id
        gone = client.create_topic("ids-all-gone").topic_id
        for topic_id, partitions in ((first, [(0, 1), (1, 2)]), (second, [(0, 3)]), (gone, [(0, 4)])):
            assert _commit(client, "all-group", topic_id, partitions)[1] == {p: ErrorCode.none for p, _ in partitions}
        _delete_topic(client, "ids-all-gone")
        # A topic that no longer exists has no id to be named by: Kafka leaves it out.
        assert _fetch(client, "all-group", None) == (ErrorCode.none, [
            (first, 0, 1, "m", ErrorCode.none), (first, 1, 2, "m", ErrorCode.none),
            (second, 0, 3, "m", ErrorCode.none)])
        # A group with no offsets: no topics.
        assert _fetch(client, "no-such-group", None) == (ErrorCode.none, [])
