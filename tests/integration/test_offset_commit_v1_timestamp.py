"""OffsetCommit v1's per-partition commit timestamp is kept as the offset's commit timestamp, as
Kafka 0.9-2.x did (-1 means now), so KIP-211's retention counts from it: on a broker with a
manual clock, an offset committed with a timestamp one retention ago expires at the next check,
one committed with -1 a retention after its commit."""

from __future__ import annotations

import struct
import time

from kio.schema.errors import ErrorCode

from tests.coordinator.conftest import ManualClock
from tests.integration.raw import RawClient
from tests.integration.test_coordinator_lifecycle import running_broker
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.wire import offsets_v0

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
RETENTION_MS = 60_000  # offsets.retention.minutes=1
CHECK_MS = 1_000
WAIT_S = 30.0  # a hang guard


def _commit_v1(client: RawClient, group: str, partitions: list[tuple[int, int, int]]) -> dict[int, ErrorCode]:
    """OffsetCommit v1 of (partition, offset, commit timestamp) to "orders", as a standalone consumer."""
    request = offsets_v0.OffsetCommitV0Request(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                               topics=(offsets_v0.OffsetCommitV0Topic("orders", tuple(
                                                   offsets_v0.OffsetCommitV0Partition(p, o, "", ts)
                                                   for p, o, ts in partitions)),))
    client.correlation_id += 1
    client_id = b"v1-client"
    client.send_frame(struct.pack(">hhih", OFFSET_COMMIT, 1, client.correlation_id, len(client_id)) + client_id
                      + offsets_v0.write_offset_commit(request, 1))
    frame = client.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == client.correlation_id
    response, _ = offsets_v0.read_offset_commit_response(frame, 4)
    return {p.partition_index: p.error_code for t in response.topics for p in t.partitions}


def _fetched(client: RawClient, group: str) -> dict[int, int]:
    response = client.request(OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}], "require_stable": False})
    (fetched,) = response.groups
    assert fetched.error_code == ErrorCode.none
    return {p.partition_index: p.committed_offset for t in fetched.topics for p in t.partitions}


def _until_fetched(client: RawClient, group: str, expected: dict[int, int]) -> None:
    """Until OffsetFetch shows `expected`: an expiry's tombstones are durable a flush after the
    check that wrote them (the clock decided; only the flush is waited for)."""
    deadline = time.monotonic() + WAIT_S
    while (fetched := _fetched(client, group)) != expected:
        assert time.monotonic() < deadline, fetched
        time.sleep(0.02)


def test_v1_commit_timestamps_decide_when_standalone_offsets_expire(tmp_path):
    clock = ManualClock()
    config = BrokerConfig({"offsets.topic.num.partitions": "1", "offsets.retention.minutes": "1",
                           "offsets.retention.check.interval.ms": str(CHECK_MS)})
    broker = Broker(config, tmp_path, port=0, clock=clock)
    # v1 is served to brokers with a ZooKeeper (v0's storage); its commit path is the coordinator's
    # whatever serves v0, so this broker serves it without one.
    broker.supported_versions[OFFSET_COMMIT] = (0, broker.supported_versions[OFFSET_COMMIT][1])
    with running_broker(broker) as (running, advance):
        with RawClient(f"127.0.0.1:{running.port}") as client:
            client.create_topic("orders", 2)
            client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["old-client"]})
            partitions = [(0, 7, clock.now - RETENTION_MS), (1, 9, -1)]
            codes = _commit_v1(client, "old-client", partitions)
            while ErrorCode.coordinator_load_in_progress in codes.values():  # the load needs no clock
                codes = _commit_v1(client, "old-client", partitions)
            assert codes == {0: ErrorCode.none, 1: ErrorCode.none}
            assert _fetched(client, "old-client") == {0: 7, 1: 9}

            advance(CHECK_MS)  # the next check: partition 0's retention ended when it was committed
            _until_fetched(client, "old-client", {0: -1, 1: 9})
            advance(RETENTION_MS - 2 * CHECK_MS)  # still within partition 1's retention (-1 is now)
            assert _fetched(client, "old-client") == {0: -1, 1: 9}
            advance(2 * CHECK_MS)
            _until_fetched(client, "old-client", {0: -1, 1: -1})
