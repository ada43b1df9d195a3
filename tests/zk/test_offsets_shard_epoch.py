"""The same leader at a higher epoch (an ISR change by the controller, a follower's restart)
keeps its offsets shard serving: a JoinGroup held in a rebalance across the epoch bump completes
with NONE, never NOT_COORDINATOR (the shard is not unloaded and loaded again)."""

from __future__ import annotations

import json

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tests.zk.offsets_cluster import until

JOIN_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, FIND_COORDINATOR = 11, 14, 15, 10
GROUP = "held"
OFFSETS_STATE = "/brokers/topics/__consumer_offsets/partitions/0/state"


def _join(group: str, instance: str, member: str = "") -> dict:
    return {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 60_000, "member_id": member,
            "group_instance_id": instance, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": b""}]}


def _sync(group: str, generation: int, member: str, instance: str, assignments: dict[str, bytes]) -> dict:
    return {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": instance,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]}


def _state(client: RawClient) -> str:
    response = client.request(DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": False})
    return response.groups[0].group_state


def test_a_held_join_group_survives_a_same_leader_epoch_bump(zk, chroot, make_broker):
    broker = make_broker({"zookeeper.connect": chroot, "broker.id": "1", "offsets.topic.replication.factor": "1",
                          "offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}).start()
    with RawClient(broker.bootstrap) as a, RawClient(broker.bootstrap) as b, RawClient(broker.bootstrap) as admin:
        until(lambda: admin.request(FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0}).error_code == 0,
              "the group's coordinator")
        joined = until(lambda: (r := a.request(JOIN_GROUP, 5, _join(GROUP, "a"))).error_code == 0 and r,
                       "member a's first join")
        synced = a.request(SYNC_GROUP, 5, _sync(GROUP, joined.generation_id, joined.member_id, "a",
                                                {joined.member_id: b"A"}))
        assert synced.error_code == ErrorCode.none
        # b's join starts a rebalance; it is held until a joins again.
        b.send_frame(b.encode(JOIN_GROUP, 5, _join(GROUP, "b")))
        until(lambda: _state(admin) == "PreparingRebalance", "the rebalance b started")

        # The controller's kind of change: the same leader and ISR at the next leader epoch.
        path = "/" + chroot.split("/", 1)[1] + OFFSETS_STATE
        data, stat = zk.get(path)
        state = json.loads(data)
        assert state["leader"] == 1
        zk.set(path, json.dumps({**state, "leader_epoch": state["leader_epoch"] + 1}).encode(), version=stat.version)
        broker.wait_for_log('"became_leader"', count=2)  # the bump is applied

        rejoined = a.request(JOIN_GROUP, 5, _join(GROUP, "a", joined.member_id))
        held = b.read_response(JOIN_GROUP, 5)
        assert held.error_code == ErrorCode.none
        assert rejoined.error_code == ErrorCode.none
        assert held.generation_id == rejoined.generation_id == joined.generation_id + 1
