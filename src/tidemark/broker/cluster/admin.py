"""Cluster administration any broker does for its clients: CreateTopics, CreatePartitions,
DeleteTopics (written to ZooKeeper, carried out by the controller), preferred leader elections,
and __consumer_offsets' creation on first use. Each answers once this broker's applied view
shows the outcome."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import NoNodeError
from kio.schema.errors import ErrorCode

from tidemark.cluster.zk import preferred_election, topic_admin, zk_data
from tidemark.cluster.zk.assignment import RackAwareMode
from tidemark.cluster.zk.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicError,
)
from tidemark.records.offsets_schema import OFFSETS_TOPIC

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from tidemark.broker.cluster.applied_view import AppliedView
    from tidemark.broker.config import BrokerConfig
    from tidemark.cluster.zk.metadata_view import ClusterSnapshot
    from tidemark.cluster.zk.session import ZkSession

log = structlog.get_logger("tidemark.cluster")

# tidemark's default for the offsets topic (Kafka has none): with 3 or more replicas a commit
# needs 2 in sync, so no lone replica ever acknowledges one.
OFFSETS_MIN_INSYNC_FROM_RF = 3
OFFSETS_MIN_INSYNC_REPLICAS = 2


class ClusterAdmin:
    def __init__(self, config: BrokerConfig, session: ZkSession, view: AppliedView) -> None:
        self.config = config
        self.session = session
        self.view = view
        self._offsets_topic_refusal: str | None = None  # the last one logged

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, tuple[int, ...]] | None = None,
                           rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED) -> zk_data.TopicAssignment:
        """CreateTopics enforces racks (all brokers or none); Kafka's ZooKeeper-era broker created
        the topics it made itself (auto-created, internal) with RackAwareMode.Safe: rack-unaware
        while racks are mixed."""
        created = await self.session.call(topic_admin.create_topic, self.session.client, name, partitions,
                                          replication_factor, configs, assignment=assignment,
                                          rack_aware_mode=rack_aware_mode)
        await self.view.wait_for(lambda s: _has_states(s, name, partitions))
        return created

    async def add_partitions(self, name: str, count: int) -> None:
        await self.session.call(topic_admin.add_partitions, self.session.client, name, count)
        await self.view.wait_for(lambda s: _has_states(s, name, count))

    async def delete_topic(self, name: str) -> None:
        await self.session.call(topic_admin.delete_topic, self.session.client, name)
        await self.view.wait_for(lambda s: name not in s.topics)

    async def elect_preferred_leaders(self, partitions: list[tuple[str, int]],
                                      timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
        """ElectLeaders (PREFERRED): the controller moves each partition's leadership to its
        preferred replica where it is alive and in the ISR. Answers Kafka's error per partition,
        once this broker's view shows the new leaders (REQUEST_TIMED_OUT after timeout_s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        snapshot = self.view.snapshot
        results: dict[tuple[str, int], ErrorCode] = {}
        wanted = []
        for key in partitions:
            view = snapshot.partitions.get(key)
            if view is None or view.state is None:
                results[key] = ErrorCode.unknown_topic_or_partition
            elif view.leader == view.replicas[0]:
                results[key] = ErrorCode.election_not_needed
            else:
                wanted.append(key)
        if not wanted:
            return results
        client = self.session.client
        handled = await self.session.call(preferred_election.request_preferred_election, client, wanted, timeout_s,
                                          timeout_s=timeout_s + 1)
        if not handled:
            return {**results, **{key: ErrorCode.request_timed_out for key in wanted}}
        # The controller wrote the states before it deleted the request: read them, as the
        # outcome, from ZooKeeper (this broker's view may not have them yet).
        states = await self.session.call(lambda: {key: _read_state(client, *key) for key in wanted})
        elected = {}
        for key, state in states.items():
            view = self.view.snapshot.partitions.get(key)
            if state is None or view is None:
                results[key] = ErrorCode.unknown_topic_or_partition
            elif state.leader == view.replicas[0]:
                results[key] = ErrorCode.none
                elected[key] = state.leader_epoch
            else:
                results[key] = ErrorCode.preferred_leader_not_available
        try:
            await self.view.wait_for(lambda s: all((v := s.partitions.get(key)) is None or v.leader_epoch >= epoch
                                                   for key, epoch in elected.items()),
                                     max(0.0, deadline - loop.time()))
        except TimeoutError:
            return {**results, **{key: ErrorCode.request_timed_out for key in elected}}
        return results

    async def ensure_offsets_topic(self) -> str | None:
        """Create __consumer_offsets on first use with offsets.topic.replication.factor replicas
        (Kafka: COORDINATOR_NOT_AVAILABLE until that many brokers are alive), and
        min.insync.replicas=2 from 3 replicas on; None once it exists, else why it does not
        (FindCoordinator carries it to the client as its error message)."""
        if OFFSETS_TOPIC in self.view.snapshot.topics:
            return None
        replication_factor = self.config["offsets.topic.replication.factor"]
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
        if replication_factor >= OFFSETS_MIN_INSYNC_FROM_RF:
            configs["min.insync.replicas"] = str(OFFSETS_MIN_INSYNC_REPLICAS)
        try:
            await self.create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], replication_factor,
                                    configs, rack_aware_mode=RackAwareMode.SAFE)
        except TopicExistsError:
            await self.view.wait_for(lambda s: OFFSETS_TOPIC in s.topics)
        except (InvalidReplicationFactorError, TimeoutError) as exc:  # a ZooKeeper call timing out included
            reason = f"{OFFSETS_TOPIC} cannot be created yet: {exc or type(exc).__name__}"
            if reason != self._offsets_topic_refusal:  # once per reason, not at every client retry
                log.warning("offsets_topic_not_created", error=reason,
                            hint="offsets.topic.replication.factor must not exceed the live brokers")
                self._offsets_topic_refusal = reason
            return reason
        return None


def _has_states(snapshot: ClusterSnapshot, topic: str, partitions: int) -> bool:
    """Whether the controller has created the state of each of the topic's first partitions."""
    return all((view := snapshot.partitions.get((topic, p))) is not None and view.state is not None
               for p in range(partitions))


def _read_state(client: KazooClient, topic: str, partition: int) -> zk_data.PartitionState | None:
    try:
        data, stat = client.get(zk_data.partition_state_path(topic, partition))
    except NoNodeError:
        return None
    return zk_data.decode_partition_state(data, stat.version)


def cluster_error_code(exc: BaseException) -> ErrorCode:
    """How a failed topic administration reaches the client (Kafka's error for each)."""
    if isinstance(exc, TopicExistsError):
        return ErrorCode.topic_already_exists
    if isinstance(exc, InvalidReplicationFactorError):
        return ErrorCode.invalid_replication_factor
    if isinstance(exc, InvalidPartitionsError):
        return ErrorCode.invalid_partitions
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, TimeoutError):  # the view did not show it in time, or ZooKeeper did not answer
        return ErrorCode.request_timed_out
    return ErrorCode.unknown_server_error
