"""OffsetForLeaderEpoch (API key 23) on the wire: KIP-279's end offsets and KIP-320's fencing."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records import build_batch

OFFSET_FOR_LEADER_EPOCH, API_VERSIONS = 23, 18


def ask(client: RawClient, version: int, wanted: list[tuple[str, int, int, int]]) -> list[tuple]:
    """(topic, partition, error, leader_epoch, end_offset) for (topic, partition, current_leader_epoch, leader_epoch)."""
    body = {"replica_id": -1, "topics": [{"topic": t, "partitions": [
        {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}]} for t, p, current, epoch in wanted]}
    if version < 3:
        del body["replica_id"]
    response = client.request(OFFSET_FOR_LEADER_EPOCH, version, body)
    return [(t.topic, p.partition, p.error_code, p.leader_epoch, p.end_offset)
            for t in response.topics for p in t.partitions]


def test_api_versions_advertises_offset_for_leader_epoch(broker):
    with RawClient(broker.bootstrap) as client:
        response = client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        [key] = [k for k in response.api_keys if k.api_key == OFFSET_FOR_LEADER_EPOCH]
        assert (key.min_version, key.max_version) == (2, 4)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offsets_and_epoch_fencing(broker, version):
    topic = f"epochs-v{version}"
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic(topic, partitions=2).error_code == 0
        for n in (3, 2):
            assert client.produce(topic, build_batch([(None, b"v", (), 1)] * n)).error_code == 0
        # The embedded broker leads every partition in epoch 0.
        assert ask(client, version, [(topic, 0, 0, 0)]) == [(topic, 0, 0, 0, 5)]  # the latest epoch: the log end
        assert ask(client, version, [(topic, 0, -1, 0)]) == [(topic, 0, 0, 0, 5)]  # no current epoch: no fencing
        assert client.produce(topic, build_batch([(None, b"v", (), 1)]), partition=1).error_code == 0
        assert ask(client, version, [(topic, 1, 0, 0), (topic, 0, 0, 0)]) == [(topic, 1, 0, 0, 1), (topic, 0, 0, 0, 5)]
        assert ask(client, version, [(topic, 0, -1, 3)]) == [(topic, 0, 0, -1, -1)]  # newer than any epoch
        assert ask(client, version, [(topic, 0, -1, -1)]) == [(topic, 0, 0, -1, -1)]
        # KIP-320: a caller whose leader epoch is newer than the broker's, or older, is told so.
        assert ask(client, version, [(topic, 0, 1, 0)]) == [(topic, 0, ErrorCode.unknown_leader_epoch, -1, -1)]
        assert ask(client, version, [(topic, 0, -2, 0)]) == [(topic, 0, ErrorCode.fenced_leader_epoch, -1, -1)]
        assert ask(client, version, [(topic, 7, 0, 0), ("no-such-topic", 0, 0, 0)]) == [
            (topic, 7, ErrorCode.unknown_topic_or_partition, -1, -1),
            ("no-such-topic", 0, ErrorCode.unknown_topic_or_partition, -1, -1)]
