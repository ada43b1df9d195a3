"""The controller: one broker of the cluster, elected through the ephemeral /controller, that
elects partition leaders and keeps ISRs free of lost brokers.

Threading (as Kafka's ControllerEventManager): kazoo's watches and session listener only queue
events; they run one at a time, in order, on the broker's ZkSession threads (at most one of them,
only while there is work: SerialEvents), and every ZooKeeper call they make is bounded by the
session's call timeout (BoundedCalls: ZkCallTimeoutError, retried as a connection loss within
the event's deadline), so a stalled ZooKeeper parks no thread of its own and no call forever.
Public operations (shutdown_broker) are queued the same way and the caller waits for them.

Election is one multi: create /controller and set /controller_epoch to epoch+1 at the version
read. Every later write goes through a ControllerFence (a multi that first checks
/controller_epoch's version), and every partition state write is also conditional on the state
znode's version, re-read and retried on BadVersion (a leader may have changed its ISR).
Brokers learn of the controller's decisions by watching the state znodes (ZkMetadataView).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from tidemark.cluster.zk import leader_election, zk_data
from tidemark.cluster.zk.errors import ClusterError, ControllerMovedError
from tidemark.cluster.zk.fencing import ControllerFence, first_failure
from tidemark.cluster.zk.registration import ensure_persistent_paths
from tidemark.cluster.zk.session import BoundedCalls, SerialEvents, ZkCallTimeoutError, ZkSession
from tidemark.records.offsets_schema import OFFSETS_TOPIC

log = logging.getLogger(__name__)

MAX_STATE_WRITE_ATTEMPTS = 20  # compare-and-set retries against concurrent leader ISR writes
CLOSE_WAIT_S = 5.0  # how long close() waits for the controller thread to resign
# An event interrupted by a connection loss runs again once connected: every handler decides from
# what it reads, so a write that did land before the loss is found done, not made twice.
EVENT_RETRY = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, deadline=60.0)
EVENT_RETRY.retry_exceptions = (*KazooRetry.RETRY_EXCEPTIONS, ZkCallTimeoutError)  # a stuck call: as a lost connection
TopicPartition = tuple[str, int]


class Controller:
    """Takes part in the election for `broker_id`; while elected, acts on broker loss and
    arrival, new topics and partitions, topic deletions, ISR change notices and controlled
    shutdown requests. `on_active_change(active)` is called on the controller thread."""

    def __init__(self, session: ZkSession, broker_id: int,
                 on_active_change: Callable[[bool], None] | None = None) -> None:
        self.client: KazooClient = session.client  # watches and listeners
        self.zk = BoundedCalls(session.client, session.call_timeout_s)  # every call the events make
        self.broker_id = broker_id
        self.on_active_change = on_active_change
        self._events = SerialEvents(session.submit)
        self._fence: ControllerFence | None = None
        self._live: dict[int, int] = {}  # registered broker -> czxid of its registration (bounces change it)
        self._topics: dict[str, zk_data.TopicAssignment] = {}
        self._topic_watches: set[str] = set()
        self._shutting_down: set[int] = set()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        ensure_persistent_paths(self.client)
        self.client.add_listener(self._session_state)
        DataWatch(self.client, zk_data.CONTROLLER, self._controller_znode)
        ChildrenWatch(self.client, zk_data.BROKER_IDS, self._event(self._brokers_changed))
        ChildrenWatch(self.client, zk_data.TOPICS, self._topics_listed)
        ChildrenWatch(self.client, zk_data.DELETE_TOPICS, self._event(self._deletions_requested))
        ChildrenWatch(self.client, zk_data.ISR_CHANGE_NOTIFICATION, self._event(self._isr_changes_noticed))
        ChildrenWatch(self.client, zk_data.CONTROLLED_SHUTDOWN, self._event(self._shutdowns_requested))
        DataWatch(self.client, zk_data.PREFERRED_REPLICA_ELECTION, self._event(self._preferred_election_requested))

    def close(self) -> None:
        """Stop taking part; the /controller znode goes with the client's session. Waits for the
        resignation at most CLOSE_WAIT_S: an event still running (a long retry, a slow
        ZooKeeper) ends at its next ZooKeeper call once the session closes, and its writes are
        fenced, so a stopping broker does not wait for it."""
        self._closed = True
        self.client.remove_listener(self._session_state)
        try:
            resigned = self._events.submit(self._resign)
        except RuntimeError:  # the session's threads are gone already
            return
        self._events.shutdown()
        try:
            resigned.result(CLOSE_WAIT_S)
        except concurrent.futures.TimeoutError:
            log.warning("broker %d: controller still busy at close", self.broker_id)

    @property
    def is_active(self) -> bool:
        return self._fence is not None

    @property
    def fence(self) -> ControllerFence | None:
        """The fence of this broker's term as controller (None when not the controller): writes
        made for the controller elsewhere go through it and fail once it is deposed."""
        return self._fence

    @property
    def epoch(self) -> int:
        """The controller epoch this broker was elected with (-1 when not the controller)."""
        fence = self._fence
        return fence.epoch if fence else -1

    # -- operations other components call ---------------------------------------------------

    def shutdown_broker(self, broker_id: int, timeout_s: float = 30.0) -> list[TopicPartition]:
        """Move the leadership of every partition `broker_id` leads to another live ISR member,
        and take it out of every ISR. Answers the partitions it still leads (it was their only
        ISR member). ControllerMovedError when this broker is not the controller."""
        return self._events.submit(self._shutdown_broker, broker_id).result(timeout_s)

    # -- kazoo's threads: queue only ----------------------------------------------------------

    def _event(self, handler: Callable[..., None]) -> Callable[..., Any]:
        def watcher(*args: Any) -> bool | None:
            if self._closed:
                return False
            self._submit(handler, *args)
            return None
        return watcher

    def _submit(self, handler: Callable[..., None], *args: Any) -> None:
        if self._closed:
            return
        try:
            self._events.submit(self._run, handler, *args)
        except RuntimeError:  # close() (or the session's) shut the queue down between the check and the submit
            pass

    def _session_state(self, state: str) -> None:
        if state == KazooState.LOST:  # our /controller went with the session
            self._submit(self._resign)

    def _controller_znode(self, data: bytes | None, _stat: Any) -> bool | None:
        if self._closed:
            return False
        self._submit(self._controller_changed, data)
        return None

    def _topics_listed(self, children: list[str]) -> bool | None:
        if self._closed:
            return False
        for topic in children:
            if topic not in self._topic_watches:
                self._topic_watches.add(topic)
                DataWatch(self.client, zk_data.topic_path(topic), self._topic_watcher(topic))
        return None

    def _topic_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def watcher(data: bytes | None, _stat: Any) -> bool | None:
            if self._closed:
                return False
            if data is None:
                self._topic_watches.discard(topic)
                self._submit(self._topic_gone, topic)
                return False
            self._submit(self._topic_changed, topic, data)
            return None
        return watcher

    # -- the controller thread -----------------------------------------------------------------

    def _run(self, handler: Callable[..., None], *args: Any) -> None:
        if self._closed:
            return  # queued before close(): this broker no longer takes part
        retry = EVENT_RETRY.copy()
        retry.interrupt = lambda: self._closed  # close() must not wait out a retry against a lost ZooKeeper
        try:
            retry(handler, *args)
        except InterruptedError:
            return
        except ControllerMovedError:
            log.info("broker %d: controller moved, resigning", self.broker_id)
            self._resign()
        except RetryFailedError:
            log.error("broker %d: controller event %s gave up: ZooKeeper unreachable", self.broker_id, handler.__name__)
        except Exception:  # noqa: BLE001 - one failed event must not stop the controller
            log.exception("broker %d: controller event %s failed", self.broker_id, handler.__name__)

    def _require_fence(self) -> ControllerFence:
        fence = self._fence
        if fence is None:
            raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
        return fence

    def _controller_changed(self, data: bytes | None) -> None:
        if data is None:  # whoever it was, that term is over (ours too: our session expired)
            self._resign()
            self._elect()
        elif zk_data.decode_controller(data) != self.broker_id and self._fence is not None:
            self._resign()

    def _elect(self) -> None:
        if self._closed:
            return
        if self._fence is None and not self._win_election():
            return
        self._failover()  # run again in full when a connection loss interrupted it
        if self.on_active_change:
            self.on_active_change(True)

    def _win_election(self) -> bool:
        data, stat = self.zk.get(zk_data.CONTROLLER_EPOCH)
        epoch = zk_data.decode_controller_epoch(data) + 1
        transaction = self.client.transaction()
        transaction.create(zk_data.CONTROLLER, zk_data.encode_controller(self.broker_id), ephemeral=True)
        transaction.set_data(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(epoch), version=stat.version)
        results = self.zk.commit(transaction)
        failure = first_failure(results)
        if isinstance(failure, NodeExistsError) and not self._won_before_a_connection_loss():
            return False  # another broker won; the /controller watch tells us when it goes
        if isinstance(failure, BadVersionError):
            self._submit(self._elect)  # an election raced ours and its winner is already gone
            return False
        if isinstance(failure, NodeExistsError):  # our own multi, retried after a connection loss
            data, stat = self.zk.get(zk_data.CONTROLLER_EPOCH)
            epoch, epoch_version = zk_data.decode_controller_epoch(data), stat.version
        elif failure is not None:
            raise failure
        else:
            epoch_version = results[1].version
        self._fence = ControllerFence(self.client, epoch, epoch_version, self.zk.timeout_s)
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        return True

    def _won_before_a_connection_loss(self) -> bool:
        try:
            data, stat = self.zk.get(zk_data.CONTROLLER)
        except NoNodeError:
            return False
        return (zk_data.decode_controller(data) == self.broker_id
                and stat.ephemeralOwner == (self.client.client_id or (None,))[0])

    def _resign(self) -> None:
        if self._fence is None:
            return
        self._fence = None
        self._shutting_down.clear()
        log.info("broker %d is no longer the controller", self.broker_id)
        if self.on_active_change:
            self.on_active_change(False)

    def _failover(self) -> None:
        """What a new controller does first: learn the cluster, then settle every partition
        (leaders lost while there was no controller, partitions without a state yet) and every
        request left pending."""
        self._live = self._read_live_brokers()
        self._topics = {}
        for topic in self.zk.get_children(zk_data.TOPICS):
            try:
                self._topics[topic] = zk_data.decode_topic(self.zk.get(zk_data.topic_path(topic))[0])
            except NoNodeError:
                continue
        self._settle(self._topics)
        self._deletions_requested(self.zk.get_children(zk_data.DELETE_TOPICS))
        self._isr_changes_noticed(self.zk.get_children(zk_data.ISR_CHANGE_NOTIFICATION))
        self._shutdowns_requested(self.zk.get_children(zk_data.CONTROLLED_SHUTDOWN))
        self._preferred_election_requested()

    def _read_live_brokers(self) -> dict[int, int]:
        live = {}
        for child in self.zk.get_children(zk_data.BROKER_IDS):
            stat = self.zk.exists(f"{zk_data.BROKER_IDS}/{child}")
            if stat is not None:
                live[int(child)] = stat.czxid
        return live

    # -- brokers --------------------------------------------------------------------------------

    def _brokers_changed(self, _children: list[str]) -> None:
        if self._fence is None:
            return
        current = self._read_live_brokers()
        # A broker that registered again since we looked (a new czxid) was lost, then came back.
        lost = {b for b, czxid in self._live.items() if current.get(b) != czxid}
        arrived = {b for b, czxid in current.items() if self._live.get(b) != czxid}
        self._live = current
        self._shutting_down -= lost
        if lost:
            log.info("controller %d: brokers lost %s", self.broker_id, sorted(lost))
            affected = {t: a for t, a in self._topics.items()
                        if any(set(r) & lost for r in a.partitions.values())}
            self._settle(affected, live=set(current) - lost)
        if arrived:
            log.info("controller %d: brokers arrived %s", self.broker_id, sorted(arrived))
            self._settle(self._topics)

    def _settle(self, topics: dict[str, zk_data.TopicAssignment], live: Collection[int] | None = None) -> None:
        """Give each partition of `topics` a state: create the missing ones, elect where the
        leader is not live, drop lost brokers from ISRs, and handle a broker registered since
        the state was written (a bounce this controller did not see, as after a failover) as
        lost, then back (elect_after_change's `registrations`)."""
        live = set(self._live) if live is None else set(live)
        for topic, assignment in _offsets_topic_first(topics):
            known = self._read_states([(topic, p) for p in assignment.partitions])
            self._create_missing_states(topic, {p: r for p, r in assignment.partitions.items()
                                                if known[topic, p] is None}, live)
            for partition, replicas in assignment.partitions.items():
                if known[topic, partition] is None:
                    continue  # just created, or waiting for a live replica
                self._update_state(topic, partition, lambda state, replicas=replicas: leader_election.elect_after_change(
                    replicas, state, live, self._require_fence().epoch, not_leader=self._shutting_down,
                    registrations=self._live), known=known[topic, partition])

    def _read_states(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, tuple[bytes, Any] | None]:
        """The state znodes (data, stat) of many partitions, read in one pipelined round (None:
        no state yet): a controller settling thousands of partitions must not pay a round trip
        for each."""
        pending = {key: self.client.get_async(zk_data.partition_state_path(*key)) for key in partitions}
        states: dict[TopicPartition, tuple[bytes, Any] | None] = {}
        for key, answer in pending.items():
            try:
                states[key] = self.zk.wait(answer, "get of a partition state")
            except NoNodeError:
                states[key] = None
        return states

    def _create_missing_states(self, topic: str, missing_replicas: Mapping[int, Sequence[int]],
                               live: Collection[int]) -> None:
        fence = self._require_fence()
        missing = {}
        for partition, replicas in missing_replicas.items():
            state = leader_election.initial_state(replicas, live, fence.epoch)
            if state is not None:  # no live replica: wait for one (Kafka's NewPartition)
                missing[partition] = state
        if not missing:
            return
        parents = [zk_data.partitions_path(topic)] + [zk_data.partition_path(topic, p) for p in missing]
        absent = [path for path in parents if self.zk.exists(path) is None]

        def build(transaction: TransactionRequest) -> None:
            for path in absent:
                transaction.create(path, b"")
            for partition, state in missing.items():
                transaction.create(zk_data.partition_state_path(topic, partition),
                                   zk_data.encode_partition_state(state))

        failure = first_failure(fence.commit(build))
        if isinstance(failure, NoNodeError):
            return  # the topic was deleted meanwhile
        if failure is not None:
            raise failure

    def _update_state(self, topic: str, partition: int,
                      decide: Callable[[zk_data.PartitionState], zk_data.PartitionState | None],
                      known: tuple[bytes, Any] | None = None) -> zk_data.PartitionState | None:
        """Compare-and-set the state znode with what `decide` makes of its current content (first
        `known`, when the caller read it already: a stale read only costs a refused write);
        answers the state now in ZooKeeper (None when the partition has no state)."""
        path = zk_data.partition_state_path(topic, partition)
        for _ in range(MAX_STATE_WRITE_ATTEMPTS):
            fence = self._require_fence()
            if known is not None:
                (data, stat), known = known, None
            else:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    return None
            current = zk_data.decode_partition_state(data, stat.version, stat.mzxid)
            wanted = decide(current)
            if wanted is None:
                return current
            results = fence.commit(lambda t: t.set_data(path, zk_data.encode_partition_state(wanted), version=stat.version))
            failure = first_failure(results)
            if failure is None:
                log.info("controller %d: %s-%d %s -> leader %d epoch %d isr %s", self.broker_id, topic, partition,
                         current.leader, wanted.leader, wanted.leader_epoch, list(wanted.isr))
                return dataclasses.replace(wanted, zk_version=results[0].version)
            if isinstance(failure, NoNodeError):
                return None
            if not isinstance(failure, BadVersionError):
                raise failure
        raise ClusterError(f"{topic}-{partition}: state kept changing under {MAX_STATE_WRITE_ATTEMPTS} writes")

    # -- topics ---------------------------------------------------------------------------------

    def _topic_changed(self, topic: str, data: bytes) -> None:
        if self._fence is None:
            return
        assignment = zk_data.decode_topic(data)
        self._topics[topic] = assignment
        known = self._read_states([(topic, p) for p in assignment.partitions])
        self._create_missing_states(topic, {p: r for p, r in assignment.partitions.items() if known[topic, p] is None},
                                    set(self._live) - self._shutting_down)

    def _topic_gone(self, topic: str) -> None:
        self._topics.pop(topic, None)

    def _deletions_requested(self, children: list[str]) -> None:
        """Remove each marked topic's znodes (its state znodes, assignment, configs) and the mark,
        in one fenced multi. Brokers drop a topic's logs when its znode goes."""
        fence = self._fence
        if fence is None:
            return
        for topic in children:
            paths = []
            try:
                for partition in self.zk.get_children(zk_data.partitions_path(topic)):
                    base = f"{zk_data.partitions_path(topic)}/{partition}"
                    paths += [f"{base}/{child}" for child in self.zk.get_children(base)] + [base]
                paths.append(zk_data.partitions_path(topic))
            except NoNodeError:
                pass
            for path in (zk_data.topic_path(topic), zk_data.topic_config_path(topic)):
                if self.zk.exists(path) is not None:
                    paths.append(path)
            paths.append(zk_data.delete_topic_path(topic))
            failure = first_failure(fence.commit(lambda t, paths=paths: [t.delete(p) for p in paths]))
            if failure is not None:
                log.warning("controller %d: deleting topic %s failed (%r); retried on the next change",
                            self.broker_id, topic, failure)
                continue
            self._topics.pop(topic, None)
            log.info("controller %d: deleted topic %s", self.broker_id, topic)

    def _isr_changes_noticed(self, children: list[str]) -> None:
        """Leaders wrote their ISR themselves and brokers watch the state znodes, so the notices
        only need consuming (Kafka answered them with UpdateMetadata)."""
        fence = self._fence
        if fence is None or not children:
            return
        fence.commit(lambda t: [t.delete(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{c}") for c in children])

    # -- preferred replica election (ElectLeaders) -------------------------------------------

    def _preferred_election_requested(self, *_watched: Any) -> None:
        """Move each listed partition's leadership to its preferred replica where it can lead,
        then delete the request: whoever asked reads the outcome from the state znodes.
        Partitions unknown here are skipped (the asker answers UNKNOWN_TOPIC_OR_PARTITION)."""
        fence = self._fence
        if fence is None:
            return
        try:
            data, stat = self.zk.get(zk_data.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return
        for topic, partition in zk_data.decode_preferred_replica_election(data):
            replicas = self._topics.get(topic, zk_data.TopicAssignment({})).partitions.get(partition)
            if replicas:
                self._update_state(topic, partition, lambda state, replicas=replicas: leader_election.elect_preferred(
                    replicas, state, self._live, fence.epoch, not_leader=self._shutting_down))
        failure = first_failure(fence.commit(
            lambda t: t.delete(zk_data.PREFERRED_REPLICA_ELECTION, version=stat.version)))
        if failure is not None and not isinstance(failure, NoNodeError):
            raise failure

    # -- controlled shutdown --------------------------------------------------------------------

    def _shutdowns_requested(self, children: list[str]) -> None:
        fence = self._fence
        if fence is None:
            return
        for child in children:
            broker_id = int(child)
            remaining = self._shutdown_broker(broker_id)
            if remaining:
                log.info("controller %d: broker %d still leads %s (no other ISR member)",
                         self.broker_id, broker_id, remaining)
            fence.commit(lambda t: t.delete(zk_data.controlled_shutdown_path(broker_id)))

    def _shutdown_broker(self, broker_id: int) -> list[TopicPartition]:
        fence = self._require_fence()
        if broker_id not in self._live:
            return []  # gone already (Kafka: BROKER_NOT_AVAILABLE): kept, it would never lead again
        self._shutting_down.add(broker_id)
        live = set(self._live)
        remaining = []
        hosted = {(topic, partition): replicas for topic, assignment in _offsets_topic_first(self._topics)
                  for partition, replicas in assignment.partitions.items() if broker_id in replicas}
        known = self._read_states(hosted)
        for (topic, partition), replicas in hosted.items():
            state = self._update_state(topic, partition, lambda s, replicas=replicas: (
                leader_election.elect_for_controlled_shutdown(replicas, s, live, self._shutting_down, fence.epoch)),
                known=known[topic, partition])
            if state is not None and state.leader == broker_id:
                remaining.append((topic, partition))
        return remaining


def _offsets_topic_first(topics: Mapping[str, zk_data.TopicAssignment]) -> list[tuple[str, zk_data.TopicAssignment]]:
    """Topics in the order a controller settles them: the offsets topic first, so the group
    coordinators move before a large topic's partitions are worked through."""
    return sorted(topics.items(), key=lambda item: item[0] != OFFSETS_TOPIC)
