"""The warm standby on broker processes: the leader of an offsets partition holding 1,000,000
records is SIGKILLed. Its follower, replaying that partition as a standby, serves the next commit
at once: never COORDINATOR_LOAD_IN_PROGRESS. Then, with the standby turned off on the broker
that takes over next, the new leader loads the partition (COORDINATOR_LOAD_IN_PROGRESS meanwhile)
and ends with the same offsets.

Two brokers, the offsets topic with one partition on both (every group lives there), filled by
OffsetCommit requests of 1,000 partitions each (one batch of 1,000 records per request).
"""

from __future__ import annotations

import asyncio
import json
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.raw import AsyncRawClient
from tests.zk.test_cluster_brokers import WAIT_S, _until, _zk_isr

RECORDS = 1_000_000
TOPIC_PARTITIONS = 1_000
GROUPS = 8  # committing side by side
ROUNDS = RECORDS // (TOPIC_PARTITIONS * GROUPS)
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10


def _commit_body(group: str, offset: int, partitions: int = TOPIC_PARTITIONS) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "orders", "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p in range(partitions)]}]}


async def _fill(port: int) -> None:
    """ROUNDS commits of every partition by each group; the last round commits offset ROUNDS."""
    async def one_group(group: str) -> None:
        client = await AsyncRawClient.connect(port)
        try:
            for round_ in range(1, ROUNDS + 1):
                response = await client.request(OFFSET_COMMIT, 8, _commit_body(group, round_))
                codes = {p.error_code for t in response.topics for p in t.partitions}
                assert codes == {ErrorCode.none}, codes
        finally:
            client.writer.close()

    await asyncio.gather(*(one_group(f"group-{g}") for g in range(GROUPS)))


async def _commit_codes_until_served(port: int, group: str, offset: int) -> list[ErrorCode]:
    """A commit sent to the new leader again while it answers NOT_COORDINATOR (it has not
    applied its leadership yet) or COORDINATOR_LOAD_IN_PROGRESS; every answer, in order."""
    codes: list[ErrorCode] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            client = await AsyncRawClient.connect(port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        try:
            while time.monotonic() < deadline:
                response = await client.request(OFFSET_COMMIT, 8, _commit_body(group, offset, partitions=1))
                code = ErrorCode(response.topics[0].partitions[0].error_code)
                codes.append(code)
                if code == ErrorCode.none:
                    return codes
                await asyncio.sleep(0.01)
        finally:
            client.writer.close()
    raise AssertionError(f"no commit succeeded within {WAIT_S}s: {codes[-5:]}")


async def _committed(port: int, group: str, partitions: list[int]) -> dict[int, int]:
    client = await AsyncRawClient.connect(port)
    try:
        response = await client.request(OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
            {"name": "orders", "partition_indexes": partitions}]}], "require_stable": False})
        (answer,) = response.groups
        assert answer.error_code == ErrorCode.none, answer.error_code
        return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}
    finally:
        client.writer.close()


async def _find_coordinator(port: int) -> int:
    """FindCoordinator until it names one (the first one creates the offsets topic)."""
    client = await AsyncRawClient.connect(port)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            response = await client.request(FIND_COORDINATOR, 3, {"key": "group-0", "key_type": 0})
            if response.error_code == ErrorCode.none:
                return response.node_id
            assert time.monotonic() < deadline, f"no coordinator within {WAIT_S}s: {response.error_code}"
            await asyncio.sleep(0.1)
    finally:
        client.writer.close()


def test_a_standby_serves_a_million_record_partition_at_once_and_without_it_the_new_leader_loads(
        make_broker, chroot, zk):
    settings = {"zookeeper.connect": chroot, "zookeeper.session.timeout.ms": "3000",
                "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
                "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "2",
                "log.cleaner.enable": "false",  # every record stays: the load reads them all
                # A follower's appends are never fsynced by the timer here: what the new leader
                # replicated past its high watermark counts only because it fsyncs on taking over.
                "tidemark.replica.flush.interval.ms": "3600000"}
    brokers = {i: make_broker({**settings, "broker.id": str(i)}).start() for i in (1, 2)}
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values())})
    admin.create_topics([NewTopic("orders", TOPIC_PARTITIONS, 1)])["orders"].result(WAIT_S)
    first = asyncio.run(_find_coordinator(brokers[1].port))  # the offsets topic: two replicas, both brokers
    _until(lambda: _zk_isr(zk, chroot, "__consumer_offsets") == {1, 2}, "both replicas in sync")
    other = 3 - first

    asyncio.run(_fill(brokers[first].port))
    expected = {p: ROUNDS for p in range(TOPIC_PARTITIONS)}

    # 1. SIGKILL the leader: the standby on the other broker takes over with no load.
    brokers[first].kill()
    codes = asyncio.run(_commit_codes_until_served(brokers[other].port, "group-0", ROUNDS + 1))
    assert ErrorCode.coordinator_load_in_progress not in codes, codes
    assert set(codes[:-1]) <= {ErrorCode.not_coordinator}, codes
    brokers[other].wait_for_log('"event": "offsets_partition_promoted"')
    assert json.loads(next(line for line in brokers[other].log_text().splitlines()
                           if "offsets_partition_promoted" in line))["loaded"] is True
    fetched = asyncio.run(_committed(brokers[other].port, "group-1", list(range(TOPIC_PARTITIONS))))
    assert fetched == expected

    # 2. The killed broker comes back without the standby; once in sync, the other one goes.
    brokers[first].settings["offsets.standby.replay.enable"] = "false"
    brokers[first].start()
    _until(lambda: _zk_isr(zk, chroot, "__consumer_offsets") == {1, 2}, "the restarted broker in sync")
    brokers[other].kill()
    codes = asyncio.run(_commit_codes_until_served(brokers[first].port, "group-0", ROUNDS + 2))
    assert codes[-1] == ErrorCode.none
    brokers[first].wait_for_log('"event": "offsets_partition_loaded"', count=1)
    loaded = [json.loads(line) for line in brokers[first].log_text().splitlines()
              if '"offsets_partition_loaded"' in line][-1]
    assert loaded["records"] >= RECORDS  # a load from the log, every record read
    fetched = asyncio.run(_committed(brokers[first].port, "group-1", list(range(TOPIC_PARTITIONS))))
    assert fetched == expected
    assert asyncio.run(_committed(brokers[first].port, "group-0", [0])) == {0: ROUNDS + 2}
