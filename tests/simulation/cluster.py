"""A deterministic simulation of one partition replicated on three brokers, with ZooKeeper and
its controller, producers writing with acks=all under min.insync.replicas=2, and a seed that
picks every delay and fault.

What runs is tidemark's: `Partition` (roles, ISR shrink and expand, the high watermark, acks=all
waiters), `follower_truncation` (the follower's OffsetForLeaderEpoch rule), `LeaderEpochFileCache`
(every log's epoch history), `leader_election` (each of the controller's decisions), `alter_isr`
(the leader's conditional ISR write), fetch.py's `_refusal` (KIP-320's epoch checks) and
offset_for_leader_epoch.py's `end_offset` (the leader's answer), roles.py's `leads_from` (a
leadership only from a state written after the broker's registration). What is modelled around
them, by the rules of the code it stands for (each function names its model): the network, the
disks (simlog.py), ZooKeeper (zookeeper.py), the broker's application of the cluster's view
(roles.py's ReplicaRoles._apply_partition), the follower's fetcher loop, the leader's side of a follower fetch, the
produce handler's acks=all answer, the flusher and the controller's event handling.

With `Settings.transactions` (issue 25), one plain producer and two transactional ones write,
and a transaction coordinator sends each transaction's COMMIT or ABORT marker to the leader
(lost, retried, sent to a new leader, late copies fenced by the epochs). The leader appends
their batches with UnifiedLog.append and the markers with UnifiedLog.append_marker (on the
in-memory log, simlog.py), producer state is a real ProducerStateManager, aborted transactions
a real TransactionIndex, and the last stable offset and collect_aborted_transactions are
UnifiedLog's. Modelled: the produce and WriteTxnMarkers handlers (txn_markers._append), the
coordinator and the read_committed consumer's rule for aborted transactions.

Time is simulated milliseconds; events run in (time, order of scheduling). Asyncio is only
there because Partition makes futures: the whole run is one coroutine that never awaits, and
futures are looked at with done().

Fault model: messages are delayed, reordered and dropped; links between brokers and between a
broker and ZooKeeper are cut for a while (a cut longer than the session timeout expires the
broker's session, so the controller sees it gone); brokers are paused (SIGSTOP), killed (the
OS keeps what they wrote), shut down cleanly and restarted; preferred-leader elections are
asked for. A power loss (a crash that loses what was not fsynced) is one fault too, but only
when nothing else is wrong, and nothing else goes wrong until that broker is back in the ISR:
Kafka's guarantee for acks=all is against one failure at a time, and two lossy failures at once
can lose an acknowledged write in Kafka too (its KIP-966).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import heapq
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from kazoo.exceptions import NoNodeError
from kio.schema.errors import ErrorCode

from tidemark.broker.apis import fetch as fetch_api
from tidemark.broker.apis import offset_for_leader_epoch
from tidemark.broker.cluster import roles
from tidemark.broker.errors import error_code_for
from tidemark.cluster.zk import isr as zk_isr
from tidemark.cluster.zk import leader_election, zk_data
from tidemark.cluster.zk.errors import ClusterError
from tidemark.log.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from tidemark.log.leader_epoch import UNDEFINED_EPOCH
from tidemark.log.producer_state import ProducerStateManager
from tidemark.records.batch import build_batch
from tidemark.records.control import read_marker
from tidemark.replication.partition import Partition
from tidemark.replication.truncation import follower_truncation

from .simlog import Record, SimLog
from .zookeeper import KazooLike, SimZooKeeper

TOPIC = "sim"
INDEX = 0
REPLICAS = (1, 2, 3)
MIN_INSYNC = 2
ZK = 0  # the network's name for ZooKeeper
CLIENT = -1  # and for the producers (and the transaction coordinator)
TXN_PRODUCERS = (3, 4)
TXN_ABORT_RATE = 0.3
ROLL_RECORDS = 8  # with transactions: a segment rolls (and producer state is snapshotted) every 8 records
# What a transactional producer retries (the same batch, the same sequence) before it aborts.
_RETRIABLE = (ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas,
              ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out)
STATE_PATH = zk_data.partition_state_path(TOPIC, INDEX)
BROKER_PATHS = {zk_data.broker_path(b): b for b in REPLICAS}


class _NotYet(Exception):
    pass


class InvariantViolation(AssertionError):
    def __init__(self, message: str, invariant: str, cause: str | None) -> None:
        super().__init__(message)
        self.invariant = invariant
        # A known cause this run's history points at (see CAUSES), or None.
        self.cause = cause


# What a violation's history can point at. A cause is named only by its own signature, seen
# in the run before the violation (each is described where it is recorded).
CAUSES = {
    "defect1": "issue 23 defect 1: an acks=all waiter completed after the leadership it appended under ended",
    "defect2": "issue 23 defect 2: the follower truncated by the pre-KIP-279 rule (leader's end offset)",
    "defect5": "issue 23 defect 5: a restarted replica took its log end as its high watermark",
    "defect8": "issue 23 defect 8: a leader alone in the ISR committed records that were not fsynced",
    "isr-write-unseen": "an ISR expansion the leader does not count until its write comes back (in flight, "
                        "or its answer lost): meanwhile the leader commits past the replica being added, "
                        "which ZooKeeper lists and the controller may elect (Kafka counts a pending "
                        "addition at once: KIP-497's maximal ISR)",
    "leader-after-power-loss": "a broker restarted after a power loss (unflushed records lost) led from a "
                               "partition state the controller wrote before it saw that restart (it still "
                               "counted the old session): a restarted broker acts on the state znode at once",
}


@dataclasses.dataclass
class Settings:
    """Broker settings, scaled down so that a run of a few simulated seconds sees many of each."""

    replica_lag_time_max_ms: int = 800
    session_timeout_ms: int = 900
    fetch_max_wait_ms: int = 150
    fetch_backoff_ms: int = 50
    request_timeout_ms: int = 400
    replica_flush_interval_ms: int = 60
    hw_checkpoint_interval_ms: int = 300
    produce_timeout_ms: int = 1200
    # Where the simulation models a rule instead of calling the code, the default is the rule the
    # code follows (Kafka's); the tests that show the simulator finds a defect switch its old
    # rule on here (or monkeypatch the real function the simulation calls).
    # "kafka": the follower decides with truncation_state and asks again until completed.
    # "legacy": replica_fetcher.py's rule before issue 23 (defect 2), one answer, leader's end.
    truncation: str = "kafka"
    # What a restarted replica's high watermark is: "checkpoint" (the
    # replication-offset-checkpoint, capped by the log end) or "log_end" (before issue 23, defect 5).
    restart_high_watermark: str = "checkpoint"
    # Where fetch.py records a follower's fetch position: only after the read succeeded, or
    # before its read (before issue 23's fix of defect 2).
    follower_position_after_read: bool = True
    # Transactional load (issue 25): one plain producer and two transactional ones, their
    # coordinator's markers, and the transaction invariants. Off, a seed runs as before
    # transactions were simulated (two plain producers), so seeds found for other defects stay valid.
    transactions: bool = False

    @property
    def isr_check_interval_ms(self) -> int:  # ClusterLink._maintain_isrs
        return max(min(self.replica_lag_time_max_ms // 2, 1000), 100)


# -- brokers ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Pending:
    """An acks=all produce waiting on the high watermark (produce.py's _wait_committed)."""

    future: asyncio.Future[None]
    offset: int
    value: str
    epoch: int
    deadline: int
    producer: int
    attempt: int
    leadership: int = 0  # the broker's leadership the append was made in
    kind: str = "produce"  # or "marker": a WriteTxnMarkers append waiting on its replication
    completed_as: tuple[bool, int, int] | None = None  # (leading, its leadership, epoch) at completion
    isr_then: tuple[frozenset[int], tuple[int, ...]] | None = None  # (leader's ISR, ZooKeeper's) then


@dataclasses.dataclass
class ControllerMemory:
    epoch: int
    live: dict[int, int] = dataclasses.field(default_factory=dict)  # broker -> czxid of its registration
    shutting_down: set[int] = dataclasses.field(default_factory=set)
    queue: collections.deque[tuple[str, tuple[Any, ...]]] = dataclasses.field(default_factory=collections.deque)


class Broker:
    def __init__(self, broker_id: int, snapshot_dir: Path | None = None) -> None:
        self.id = broker_id
        self.up = False
        self.incarnation = 0
        self.paused = False
        self.backlog: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.log = SimLog(f"{TOPIC}-{INDEX}@{broker_id}", snapshot_dir=snapshot_dir)
        self.hw_checkpoint = 0  # replication-offset-checkpoint on disk
        self.partition: Partition | None = None
        self.session: int | None = None
        self.registered = False
        self.registration_czxid: int | None = None  # of its current /brokers/ids/N
        self.applied_version = -1
        self.view: zk_data.PartitionState | None = None
        self.latest: zk_data.PartitionState | None = None  # the newest state the view has seen
        self.missed_watch = False
        self.controller: ControllerMemory | None = None
        self.pending: list[Pending] = []
        self.parked: dict[int, tuple[int, int, int, int, int, bool]] = {}
        # The fetcher: (leader, epoch, phase) while following; the token changes with every
        # restart of the loop, so answers to an abandoned request are dropped.
        self.following: tuple[int, int] | None = None
        self.phase = "truncate"
        self.fetch_token = 0
        self.isr_write_in_flight = False
        # The flusher.
        self.dirty = False
        self.replicated = False
        self.flush_running = False
        self.replica_timer = False
        self.waiter_check_scheduled = False
        self.shutting_down = False
        self.power_lost = False  # restarted after a power loss, not yet back in the ISR
        self.left_isr = False
        self.leadership = 0  # counts this broker's leaderships of the partition (and restarts)
        self.stopped_how = ""
        self.zk_waiting: set[int] = set()
        self.fetch_request: int | None = None
        self.shutdown_request: int | None = None


# -- the simulation -----------------------------------------------------------------------------


class Simulation:
    def __init__(self, seed: int, settings: Settings | None = None, trace: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.settings = settings or Settings()
        self.now = 0
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.full_trace = trace
        self.trace: collections.deque[tuple[int, str, tuple[Any, ...]]] = collections.deque(
            maxlen=None if trace else 80)
        self.zk = SimZooKeeper(self.settings.session_timeout_ms)
        self.zk.on_change = self._zk_changed
        # Each broker's producer snapshots (real files: ProducerStateManager writes and loads them).
        self.transactions = self.settings.transactions
        shm = "/dev/shm" if Path("/dev/shm").is_dir() else None  # memory: thousands of seeds' fsyncs cost nothing
        self.snapshot_root = Path(tempfile.mkdtemp(prefix="tidemark-sim-", dir=shm)) if self.transactions else None
        self.brokers = {}
        for b in REPLICAS:
            if self.snapshot_root is not None:
                (self.snapshot_root / str(b)).mkdir()
            self.brokers[b] = Broker(b, self.snapshot_root / str(b) if self.snapshot_root is not None else None)
            if self.transactions:
                self.brokers[b].log.roll_records = ROLL_RECORDS
        self.blocked: set[frozenset[int]] = set()
        self._fifo: dict[tuple[int, int], int] = {}  # (from, to) -> time of its last delivery
        self._touched: set[Broker] = set()  # brokers that ran something in this step: to check
        self.slow: dict[frozenset[int], int] = {}
        rng = self.rng
        self.drop_rate = rng.choice([0.0, 0.0, 0.01, 0.03, 0.08])
        self.jitter_ms = rng.choice([1, 3, 10, 30])
        self.fault_end_ms = rng.randint(2500, 7000)
        self.fault_mean_ms = rng.choice([80, 200, 400, 800])
        self.faults_on = True
        self.producing = True
        self.settled = False
        self._next_request = 0
        self.producers: dict[int, dict[str, Any]] = {}
        # The checker's state.
        self.committed: list[Record] = []
        self.acked: dict[int, tuple[str, int]] = {}  # offset -> (value, when)
        self.leader_of_epoch: dict[int, int] = {}
        self.zk_leader_of_epoch: dict[int, int] = {}
        self.hw_seen: dict[tuple[int, int, int], int] = {}  # (broker, incarnation, epoch) -> leader's hw
        self.verified: dict[int, int] = {}  # broker -> offset below which its log matched `committed`
        # Transactions: (producer, n) -> its outcome ("commit"/"abort", None until decided), the
        # offsets of its acknowledged batches and whether its marker was acknowledged; the
        # read_committed reader's position in the committed log and the offsets it was shown;
        # each leadership's last stable offset.
        self.txns: dict[tuple[int, int], dict[str, Any]] = {}
        self.reader_pos = 0
        self.visible: set[int] = set()
        self.lso_seen: dict[tuple[int, int, int], int] = {}
        self.stats = collections.Counter()
        self.suspect: str | None = None  # a known cause seen earlier in this run
        self.findings: list[InvariantViolation] = []  # every violation, the fatal one last

    # -- the event loop -------------------------------------------------------------------------

    def at(self, delay: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + max(0, delay), self._seq, fn, args))

    def on_broker(self, broker: Broker, delay: int, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn` on `broker` after `delay` if this incarnation is still up (held while paused)."""
        self.at(delay, self._broker_event, broker, broker.incarnation, fn, args)

    def _broker_event(self, broker: Broker, incarnation: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if not broker.up or broker.incarnation != incarnation:
            return
        if broker.paused:
            broker.backlog.append((fn, args))
            return
        self._touched.add(broker)
        fn(*args)
        if broker.pending:
            done = False
            for pending in broker.pending:
                if pending.completed_as is None and pending.future.done():
                    p = broker.partition
                    pending.completed_as = (p.is_leader, broker.leadership, p.leader_epoch)
                    state = self.zk.partition_state(TOPIC, INDEX)
                    pending.isr_then = (p.maximal_isr, state.isr)
                    done = True
            if done and not broker.waiter_check_scheduled:
                broker.waiter_check_scheduled = True  # the produce handler resumes in a later loop turn
                self.on_broker(broker, 0, self._answer_waiters, broker)

    def log_event(self, fmt: str, args: tuple[Any, ...] = ()) -> None:
        """A trace line, formatted only when shown."""
        self.trace.append((self.now, fmt, args))

    def violation(self, invariant: str, detail: str, cause: str | None = None, fatal: bool = True,
                  suspect: bool = True) -> None:
        """Stop the run on a violation; one that corrupts nothing (`fatal` False) is recorded and
        the run goes on, with its cause suspected in what follows (unless `suspect` is False: the
        later checks name that cause themselves)."""
        cause = cause or self.suspect
        exc = InvariantViolation(f"seed {self.seed}: invariant violated at {self.now} ms: {invariant}: {detail}\n"
                                 f"cause: {CAUSES.get(cause, 'unknown')}\n"
                                 f"replay: TIDEMARK_SIM_SEED={self.seed} pytest tests/simulation -k replay "
                                 f"(or python -m tests.simulation.run --seed {self.seed} --trace)\n"
                                 f"{self.settings}\nlast steps:\n{self.format_trace()}\n{self.describe()}",
                                 invariant, cause)
        self.findings.append(exc)
        if fatal:
            raise exc
        if suspect:
            self.suspect = self.suspect or cause

    def format_trace(self) -> str:
        return "\n".join(f"{when:>7} {fmt % args if args else fmt}" for when, fmt, args in self.trace)

    def describe(self) -> str:
        lines = []
        for b in self.brokers.values():
            p = b.partition
            role = "down" if not b.up else (
                f"{'LEADER' if p.is_leader else 'follower of ' + str(p.leader_id)} epoch {p.leader_epoch} "
                f"isr {sorted(p.isr)}" if p is not None else "starting")
            lines.append(f"broker {b.id}: {role} leo {b.log.log_end_offset} hw {b.log.high_watermark} "
                         f"lso {b.log.last_stable_offset} ongoing {dict(b.log.producer_state.ongoing_txns)} "
                         f"aborted {[(a.producer_id, a.first_offset, a.last_offset) for a in b.log.aborted][-6:]} "
                         f"rp {b.log.recovery_point} epochs {[tuple(e) for e in b.log.leader_epoch_cache.entries]} "
                         f"log {[f'{r.value}@{r.epoch}' for r in b.log.records][-12:]}")
        lines.append(f"zk state: {self.zk.partition_state(TOPIC, INDEX)}")
        return "\n".join(lines)

    def run(self) -> collections.Counter:
        """Run the seed to its end and check convergence; raises InvariantViolation."""
        self._start_cluster()
        for producer in (1,) if self.transactions else (1, 2):
            self.producers[producer] = {"n": 0, "value": None, "attempt": 0, "leader": REPLICAS[0]}
            self.at(self.rng.randint(0, 50), self._produce_next, producer)
        for producer in TXN_PRODUCERS if self.transactions else ():  # each with its producer id
            self.producers[producer] = {"txn": True, "pid": 1000 + producer, "epoch": 0, "seq": 0, "n": 0,
                                        "coordinator_epoch": 0, "bump": False, "open": False, "attempt": 0,
                                        "value": None, "batch": None, "leader": REPLICAS[0]}
            self.at(self.rng.randint(0, 50), self._txn_begin, producer)
        self.at(self._fault_gap(), self._inject_fault)
        self.at(self.fault_end_ms, self._heal)
        self.at(self.fault_end_ms + 500, self._settled)
        end = self.fault_end_ms + 8000
        while self._queue and not self.settled:
            when, _, fn, args = heapq.heappop(self._queue)
            if when > end:
                break
            self.now = when
            fn(*args)
            self.stats["steps"] += 1
            self.check()
        self.check_converged()
        self.stats["sim_ms"] = self.now
        return self.stats

    def _settled(self) -> None:
        """After the faults: end the run once converged (else at the latest 8 s after)."""
        try:
            self.check_converged(quiet=True)
            self.settled = True
        except _NotYet:
            self.at(100, self._settled)

    # -- the network ----------------------------------------------------------------------------

    def reachable(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.blocked

    def latency(self, a: int, b: int) -> int:
        return 1 + self.rng.randint(0, self.jitter_ms) + self.slow.get(frozenset((a, b)), 0)

    def send(self, src: int, dst: int, fn: Callable[..., None], *args: Any) -> bool:
        """A message from `src` to `dst` (a broker, ZK or CLIENT): lost if the link is cut or by
        chance (a broken connection), else delivered after the link's latency (so two messages
        may pass each other). False if lost."""
        if not self.reachable(src, dst) or (self.drop_rate and self.rng.random() < self.drop_rate):
            self.stats["dropped"] += 1
            return False
        delay = self.latency(src, dst)
        if ZK in (src, dst):  # one TCP connection per session: ZooKeeper's order is kept both ways
            delay = max(delay, self._fifo.get((src, dst), 0) - self.now)
            self._fifo[(src, dst)] = self.now + delay
        if dst in self.brokers:
            self.on_broker(self.brokers[dst], delay, fn, *args)
        else:
            self.at(delay, fn, *args)
        return True

    def notify(self, broker: Broker, fn: Callable[..., None], *args: Any) -> None:
        """A watch firing on `broker`: if the connection is down, kazoo sets the watch again on
        reconnect and it fires then, with what ZooKeeper holds at that time (_reconnected)."""
        if broker.session is None or broker.session not in self.zk.sessions:
            return
        if not self.send(ZK, broker.id, fn, *args):
            broker.missed_watch = True

    # -- ZooKeeper: sessions, watches, the controller ---------------------------------------------

    def _zk_changed(self, path: str) -> None:
        if path == STATE_PATH:
            state = self.zk.partition_state(TOPIC, INDEX)
            if state is not None:
                known = self.zk_leader_of_epoch.setdefault(state.leader_epoch, state.leader)
                if known != state.leader and state.leader != zk_data.NO_LEADER and known != zk_data.NO_LEADER:
                    self.violation("at most one leader per epoch",
                                   f"ZooKeeper names leader {state.leader} for epoch {state.leader_epoch}, "
                                   f"which {known} led")
                self.log_event("zk: state %s", (state,))
            for b in self.brokers.values():  # each broker's data watch
                self.notify(b, self._watch_fired, b, b.session, state)
        elif path in BROKER_PATHS:
            self.log_event("zk: %s %s", (path, "registered" if path in self.zk.nodes else "gone"))
            controller = self._controller_broker()
            if controller is not None:
                self.notify(controller, self._controller_event, controller, "brokers_changed")
        elif path == zk_data.CONTROLLER and path not in self.zk.nodes:
            for b in self.brokers.values():
                self.notify(b, self._stand_for_controller, b, b.session)

    def _controller_broker(self) -> Broker | None:
        node = self.zk.nodes.get(zk_data.CONTROLLER)
        if node is None:
            return None
        return self.brokers[zk_data.decode_controller(node.data)]

    def zk_call(self, broker: Broker, op: Callable[[], Any], on_reply: Callable[[Any], None]) -> None:
        """A ZooKeeper round trip from `broker`: `op` runs at ZooKeeper (atomically) and
        `on_reply` gets its result or exception on the broker; TimeoutError if either way is lost."""
        self._next_request += 1
        request = self._next_request
        broker.zk_waiting.add(request)
        session = broker.session

        def at_zk() -> None:
            if session is None or session not in self.zk.sessions:
                result: Any = NoNodeError("session expired")
            else:
                self.zk.heard(session, self.now)
                try:
                    result = op()
                except Exception as exc:  # noqa: BLE001 - goes back to the caller as the answer
                    result = exc
            self.send(ZK, broker.id, answered, result)

        def answered(result: Any) -> None:
            if request in broker.zk_waiting:
                broker.zk_waiting.discard(request)
                on_reply(result)

        def timed_out() -> None:
            if request in broker.zk_waiting:
                broker.zk_waiting.discard(request)
                on_reply(TimeoutError("zookeeper request timed out"))

        self.send(broker.id, ZK, at_zk)
        self.on_broker(broker, self.settings.request_timeout_ms, timed_out)

    def _ping(self, broker: Broker) -> None:
        """The ZooKeeper client's heartbeat; finds out about an expired session and starts anew
        (a broker registers again after an expiry)."""
        session = broker.session

        def reply(result: Any) -> None:
            if session != broker.session:
                return
            if result is True:
                if broker.missed_watch:
                    self._reconnected(broker, session)
            elif isinstance(result, BaseException) and not isinstance(result, TimeoutError):
                self.log_event("broker %d: session %s expired", (broker.id, session))
                self._resign(broker)
                broker.session = None
                broker.registered = False
                self._open_session(broker)
        if session is not None:
            self.zk_call(broker, lambda: True, reply)
        self.on_broker(broker, self.settings.session_timeout_ms // 3, self._ping, broker)

    def _reconnected(self, broker: Broker, session: int) -> None:
        """Watches missed while the connection was down fire now, with the current data."""
        broker.missed_watch = False
        self._watch_fired(broker, session, self.zk.partition_state(TOPIC, INDEX))
        if broker.controller is not None:
            self._controller_event(broker, "brokers_changed")
        if zk_data.CONTROLLER not in self.zk.nodes:
            self._stand_for_controller(broker, session)

    def _expire_sessions(self) -> None:
        for session in self.zk.expire(self.now):
            self.log_event("zk: session %d expired", (session,))
        self.at(50, self._expire_sessions)

    def _open_session(self, broker: Broker) -> None:
        def opened(result: Any) -> None:
            if isinstance(result, BaseException):
                self.on_broker(broker, 100, self._open_session, broker)
                return
            broker.session = result
            self._register(broker)

        def op() -> int:
            return self.zk.open_session(self.now)
        # Opening needs no session: talk to ZooKeeper directly.
        self._next_request += 1

        def at_zk() -> None:
            self.send(ZK, broker.id, opened, op())
        self.send(broker.id, ZK, at_zk)
        self.on_broker(broker, self.settings.request_timeout_ms,
                       lambda: None if broker.session is not None else self._open_session(broker))

    def _register(self, broker: Broker) -> None:
        """BrokerRegistration.register: the ephemeral /brokers/ids/N, once a previous session's
        is gone; then the controller election and the view (ClusterLink.start)."""
        session = broker.session

        def op() -> Any:
            stat = self.zk.exists(zk_data.broker_path(broker.id))
            if stat is None or stat.ephemeralOwner != session:  # ours: made before a lost answer
                stat = self.zk.create(zk_data.broker_path(broker.id), b"{}", session=session)
            return stat.czxid, self.zk.partition_state(TOPIC, INDEX)

        def reply(result: Any) -> None:
            if session != broker.session or broker.registered:
                return
            if isinstance(result, BaseException):
                self.on_broker(broker, 100, self._register, broker)
                return
            broker.registered = True
            broker.registration_czxid, state = result
            self.log_event("broker %d: registered (session %d, czxid %d)", (broker.id, session, result[0]))
            self._stand_for_controller(broker, session)
            self._watch_fired(broker, session, state)
        self.zk_call(broker, op, reply)

    def _watch_fired(self, broker: Broker, session: int, state: zk_data.PartitionState | None) -> None:
        """ZkMetadataView: keeps the newest state from connect on; ClusterLink applies it once
        started (registered), and every newer one as it comes."""
        if session != broker.session or state is None:
            return
        if broker.latest is None or state.zk_version > broker.latest.zk_version:
            broker.latest = state
        if broker.registered:
            self._apply(broker, broker.latest)

    def _stand_for_controller(self, broker: Broker, session: int) -> None:
        """Controller._win_election: create /controller and bump /controller_epoch in one multi."""
        if session != broker.session:
            return

        def op() -> int:
            data, stat = self.zk.get(zk_data.CONTROLLER_EPOCH)
            owner = self.zk.exists(zk_data.CONTROLLER)
            if owner is not None and owner.ephemeralOwner == session:  # _won_before_a_connection_loss
                return zk_data.decode_controller_epoch(data)
            epoch = zk_data.decode_controller_epoch(data) + 1
            self.zk.create(zk_data.CONTROLLER, zk_data.encode_controller(broker.id, 0), session=session)
            self.zk.set(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(epoch), stat.version)
            return epoch

        def reply(result: Any) -> None:
            if session != broker.session or broker.controller is not None:
                return
            if isinstance(result, TimeoutError):  # EVENT_RETRY: ask again (it may have won)
                self.on_broker(broker, 50, self._stand_for_controller, broker, session)
                return
            if isinstance(result, BaseException):
                return
            broker.controller = ControllerMemory(result)
            self.log_event("broker %d: controller, epoch %d", (broker.id, result))
            self._controller_event(broker, "failover")
        self.zk_call(broker, op, reply)

    def _resign(self, broker: Broker) -> None:
        if broker.controller is not None:
            self.log_event("broker %d: no longer the controller", (broker.id,))
        broker.controller = None

    def _controller_event(self, broker: Broker, event: str, *args: Any) -> None:
        """Queue an event for the controller thread, which handles one at a time, in order."""
        memory = broker.controller
        if memory is None:
            return
        memory.queue.append((event, args))
        if len(memory.queue) == 1:
            self._handle_controller_event(broker, memory)

    def _handle_controller_event(self, broker: Broker, memory: ControllerMemory) -> None:
        """The first queued event, handled as Controller's handler would, its reads and fenced
        writes atomic at ZooKeeper; retried in place while ZooKeeper cannot be reached (EVENT_RETRY)."""
        if broker.controller is not memory or not memory.queue:
            return
        event, args = memory.queue[0]
        session = broker.session

        def fenced() -> bool:
            node = self.zk.nodes.get(zk_data.CONTROLLER)
            return (node is not None and node.stat.ephemeralOwner == session
                    and zk_data.decode_controller_epoch(self.zk.get(zk_data.CONTROLLER_EPOCH)[0]) == memory.epoch)

        def update_state(decide: Callable[[zk_data.PartitionState], zk_data.PartitionState | None]) -> Any:
            current = self.zk.partition_state(TOPIC, INDEX)
            wanted = decide(current) if current is not None else None
            if wanted is None:
                return current
            self.zk.set(STATE_PATH, zk_data.encode_partition_state(wanted), current.zk_version)
            return wanted

        def read_live() -> dict[int, int]:
            return {b: self.zk.nodes[path].stat.czxid for path, b in BROKER_PATHS.items() if path in self.zk.nodes}

        def settle(live: set[int]) -> None:
            update_state(lambda state: leader_election.elect_after_change(
                REPLICAS, state, live, memory.epoch, not_leader=memory.shutting_down, registrations=memory.live))

        def op() -> Any:
            if not fenced():
                return "moved"
            if event == "failover":
                memory.live = read_live()
                settle(set(memory.live))
            elif event == "brokers_changed":
                current = read_live()
                lost = {b for b, czxid in memory.live.items() if current.get(b) != czxid}
                arrived = {b for b, czxid in current.items() if memory.live.get(b) != czxid}
                memory.live = current
                memory.shutting_down -= lost
                if lost:
                    settle(set(current) - lost)
                if arrived:
                    settle(set(current))
            elif event == "preferred":
                update_state(lambda state: leader_election.elect_preferred(
                    REPLICAS, state, set(memory.live), memory.epoch, not_leader=memory.shutting_down))
            elif event == "shutdown":
                if args[0] not in memory.live:  # Controller._shutdown_broker: gone already
                    return "done"
                memory.shutting_down.add(args[0])
                update_state(lambda state: leader_election.elect_for_controlled_shutdown(
                    REPLICAS, state, set(memory.live), memory.shutting_down, memory.epoch))
            return "done"

        def reply(result: Any) -> None:
            if broker.controller is not memory:
                return
            if result == "moved":
                self._resign(broker)
                return
            if isinstance(result, BaseException):
                self.on_broker(broker, 50, self._handle_controller_event, broker, memory)
                return
            if event == "shutdown":
                self.send(broker.id, args[0], self._shutdown_answered, self.brokers[args[0]], args[1])
            memory.queue.popleft()
            self._handle_controller_event(broker, memory)
        self.log_event("controller %d: %s %s", (broker.id, event, args))
        self.zk_call(broker, op, reply)

    # -- a broker's life ------------------------------------------------------------------------

    def _start_cluster(self) -> None:
        self.zk.create(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(0))
        state = leader_election.initial_state(REPLICAS, set(REPLICAS), 0)
        self.zk.create(STATE_PATH, zk_data.encode_partition_state(state))
        self.at(0, self._expire_sessions)
        for broker in self.brokers.values():
            self._start(broker)

    def _start(self, broker: Broker) -> None:
        """A broker process starts: its log as the disk has it, a Partition without a role yet
        (PartitionManager._partition), a new ZooKeeper session and registration."""
        broker.incarnation += 1
        broker.up = True
        broker.paused = False
        broker.backlog = []
        broker.session = None
        broker.registered = False
        broker.applied_version = -1
        broker.latest = None
        broker.controller = None
        broker.pending = []
        broker.parked = {}
        broker.following = None
        broker.fetch_token += 1
        broker.isr_write_in_flight = False
        broker.dirty = broker.replicated = broker.flush_running = broker.replica_timer = False
        broker.waiter_check_scheduled = False
        broker.shutting_down = False
        broker.zk_waiting = set()
        if self.settings.restart_high_watermark == "checkpoint":
            broker.log.update_high_watermark(broker.hw_checkpoint)
        hw = broker.log.high_watermark
        if hw > len(self.committed) or broker.log.records[:hw] != self.committed[:hw]:
            self.violation("a restarted replica's high watermark is one a leader committed",
                           f"broker {broker.id} restarts with high watermark {hw} (log end "
                           f"{broker.log.log_end_offset}) over records leaders did not commit "
                           f"(committed: {len(self.committed)})", "defect5", fatal=False)
        # PartitionManager._partition: no leader, at epoch -1, until the view names one.
        partition = Partition(TOPIC, INDEX, broker.log, leader_epoch=-1, local_id=broker.id)
        partition.become_follower(None, -1, REPLICAS, frozenset(), -1)
        broker.leadership += 1
        broker.partition = partition
        self.hw_seen = {k: v for k, v in self.hw_seen.items() if k[0] != broker.id}
        self.verified[broker.id] = 0
        broker.log.modified_from = 0
        self._touched.add(broker)
        self.log_event("broker %d: started, leo %d hw %d rp %d", (
            broker.id, broker.log.log_end_offset, broker.log.high_watermark, broker.log.recovery_point))
        self._open_session(broker)
        self.on_broker(broker, self.settings.session_timeout_ms // 3, self._ping, broker)
        self.on_broker(broker, self.settings.isr_check_interval_ms, self._maintain_isr, broker)
        self.on_broker(broker, self.settings.hw_checkpoint_interval_ms, self._checkpoint_hw, broker)

    def _stop(self, broker: Broker, how: str) -> None:
        """The process ends: `kill` keeps what it wrote, `power` loses what was not fsynced,
        `clean` flushed everything and closed its session first."""
        self.log_event("broker %d: %s stop", (broker.id, how))
        broker.up = False
        broker.partition = None
        broker.controller = None
        if how == "clean":
            broker.log.close()  # flushed, producer state snapshotted
            broker.hw_checkpoint = broker.log.high_watermark
            if broker.session is not None:
                self.zk.close_session(broker.session)
        held, held_aborted = producer_summary(broker.log.producer_state), broker.log.aborted
        broker.log = broker.log.after_crash(self.rng, power_loss=how == "power", now_ms=self.now)
        broker.power_lost = how == "power"
        broker.left_isr = False
        broker.session = None
        if self.transactions:
            self._check_reloaded(broker, how, held, held_aborted)

    def _check_reloaded(self, broker: Broker, how: str, held: Any, held_aborted: list[Any]) -> None:
        """The producer state and .txnindex a restart loads (newest snapshot, then the batches
        after it) are what the replica held (after a power loss: what a scan of the records it
        kept finds)."""
        if how == "power":
            scanned = SimLog("scan", broker.log.records)
            held, held_aborted = producer_summary(scanned.producer_state), scanned.aborted
        found, found_aborted = producer_summary(broker.log.producer_state), broker.log.aborted
        if found != held or found_aborted != held_aborted:
            self.violation("producer state and aborted transactions rebuilt at a restart are what the replica held",
                           f"broker {broker.id} ({how} stop, log end {broker.log.log_end_offset}) held {held}, "
                           f"aborted {held_aborted}; loaded {found}, aborted {found_aborted}")

    def _checkpoint_hw(self, broker: Broker) -> None:
        """LogManager's periodic replication-offset-checkpoint (atomic, durable)."""
        broker.hw_checkpoint = broker.log.high_watermark
        self.on_broker(broker, self.settings.hw_checkpoint_interval_ms, self._checkpoint_hw, broker)

    # -- the view: ClusterLink._apply for this partition ----------------------------------------

    def _apply(self, broker: Broker, state: zk_data.PartitionState) -> None:
        if state.zk_version <= broker.applied_version or broker.shutting_down:
            return
        broker.applied_version = state.zk_version
        broker.view = state
        p = broker.partition
        isr_now = frozenset(state.isr)
        if broker.power_lost:  # back from a power loss once the ISR took it out and in again
            if broker.id not in state.isr:
                broker.left_isr = True
            elif broker.left_isr:
                broker.power_lost = False
        # ClusterLink._apply (broker/cluster/roles.py once split): a partition that refuses a
        # stale leadership (an epoch not above its own) changes no role.
        if state.leader == broker.id:
            if not p.is_leader or p.leader_epoch != state.leader_epoch:
                if not roles.leads_from(state, broker.registration_czxid):  # ReplicaRoles._apply_partition
                    self.log_event("broker %d: leadership of epoch %d is from before its registration", (
                        broker.id, state.leader_epoch))
                    return
                # What the election itself moves the high watermark over is checked too (check()).
                self.hw_seen.setdefault((broker.id, broker.incarnation, state.leader_epoch), p.high_watermark)
                was_leading = p.is_leader
                if p.become_leader(state.leader_epoch, REPLICAS, isr_now, state.zk_version, self.now) is False:
                    self.log_event("broker %d: leadership of epoch %d refused", (broker.id, state.leader_epoch))
                    return
                if not was_leading:
                    broker.leadership += 1
                self._stop_following(broker)
                self._schedule_flush(broker)
                self.log_event("broker %d: leader, epoch %d isr %s leo %d hw %d", (
                    broker.id, state.leader_epoch, sorted(isr_now), broker.log.log_end_offset, p.high_watermark))
                self._became_leader(broker, state.leader_epoch)
            elif state.zk_version > p.zk_version:
                p.update_isr(isr_now, state.zk_version)
                self._schedule_flush(broker)
        elif p.leader_id != state.leader or p.leader_epoch != state.leader_epoch or p.is_leader:
            leader = state.leader if state.leader >= 0 else None
            was_leading = p.is_leader
            if p.become_follower(leader, state.leader_epoch, REPLICAS, isr_now, state.zk_version) is False:
                self.log_event("broker %d: following %s at epoch %d refused", (broker.id, leader, state.leader_epoch))
                return
            if was_leading:
                broker.leadership += 1
            self._stop_following(broker)
            self.log_event("broker %d: follows %s, epoch %d", (broker.id, leader, state.leader_epoch))
            if leader is not None:
                self._follow(broker, leader)
        else:
            p.isr, p.zk_version = isr_now, state.zk_version

    # -- the flusher and the leader's ISR maintenance -------------------------------------------

    def _schedule_flush(self, broker: Broker) -> None:
        """PartitionManager.schedule_flush."""
        if broker.partition.has_in_sync_followers:
            self._mark_replicated(broker)
        else:
            self._mark_dirty(broker)

    def _mark_dirty(self, broker: Broker) -> None:
        broker.replicated = False
        broker.dirty = True
        if not broker.flush_running:
            broker.flush_running = True
            self.on_broker(broker, 0, self._flush_round, broker)

    def _mark_replicated(self, broker: Broker) -> None:
        if broker.dirty:
            return
        broker.replicated = True
        if not broker.replica_timer:
            broker.replica_timer = True
            self.on_broker(broker, self.settings.replica_flush_interval_ms, self._flush_replicated, broker)

    def _flush_replicated(self, broker: Broker) -> None:
        broker.replica_timer = False
        if broker.replicated:
            self._mark_dirty(broker)

    def _flush_round(self, broker: Broker) -> None:
        """Flusher._run: one fsync round for what was dirty, then flushed_to on the loop."""
        broker.dirty = False
        log = broker.log
        started = log.begin_flush()
        self.on_broker(broker, self.rng.randint(1, 8), self._flushed, broker, log, started)

    def _flushed(self, broker: Broker, log: SimLog, started: tuple[int, int]) -> None:
        recovery_point = log.finish_flush(started)
        broker.partition.flushed_to(recovery_point)
        if broker.dirty:
            self.on_broker(broker, 0, self._flush_round, broker)
        else:
            broker.flush_running = False

    def _maintain_isr(self, broker: Broker) -> None:
        """ClusterLink._maintain_isrs and _write_isr: shrink or expand, written with alter_isr."""
        self.on_broker(broker, self.settings.isr_check_interval_ms, self._maintain_isr, broker)
        p = broker.partition
        if not p.is_leader or broker.isr_write_in_flight or broker.session is None:
            return
        wanted = (p.isr_to_shrink(self.now, self.settings.replica_lag_time_max_ms) or p.isr_to_expand()
                  or p.isr_unconfirmed)
        if wanted is None:
            return
        epoch, version = p.leader_epoch, p.zk_version
        broker.isr_write_in_flight = True
        p.isr_write_pending(wanted)  # counted from now on (KIP-497's maximal ISR)

        def reply(result: Any) -> None:
            broker.isr_write_in_flight = False
            if isinstance(result, (ClusterError, TimeoutError, NoNodeError)):
                self.log_event("broker %d: isr write %s refused: %r", (broker.id, sorted(wanted), result))
                return
            if isinstance(result, BaseException):
                raise result
            if p.is_leader and p.leader_epoch == epoch:
                p.update_isr(frozenset(result.isr), result.zk_version)
                self._schedule_flush(broker)
                self.log_event("broker %d: isr now %s", (broker.id, list(result.isr)))
        self.zk_call(broker, lambda: zk_isr.alter_isr(KazooLike(self.zk), broker.id, TOPIC, INDEX, epoch,
                                                      sorted(wanted), version), reply)

    # -- the follower's fetcher -----------------------------------------------------------------

    def _follow(self, broker: Broker, leader: int) -> None:
        broker.following = (leader, broker.partition.leader_epoch)
        broker.phase = "truncate"  # ReplicaFetcher.add: truncate against the leader first
        broker.fetch_token += 1
        self.on_broker(broker, 0, self._fetch_step, broker, broker.fetch_token)

    def _stop_following(self, broker: Broker) -> None:
        broker.following = None
        broker.fetch_token += 1

    def _fetch_step(self, broker: Broker, token: int) -> None:
        if token != broker.fetch_token or broker.following is None:
            return
        leader, epoch = broker.following
        p, log = broker.partition, broker.log
        self._next_request += 1
        request = self._next_request
        broker.fetch_request = request
        if broker.phase == "truncate":
            self.send(broker.id, leader, self._serve_offset_for_leader_epoch, self.brokers[leader], broker.id,
                      request, token, p.leader_epoch, log.latest_epoch)
        else:
            self.send(broker.id, leader, self._serve_fetch, self.brokers[leader], broker.id, request, token,
                      log.log_end_offset, p.leader_epoch, self.rng.randint(1, 6), self.now)
        self.on_broker(broker, self.settings.request_timeout_ms, self._fetch_timed_out, broker, token, request)

    def _fetch_timed_out(self, broker: Broker, token: int, request: int) -> None:
        if token == broker.fetch_token and broker.fetch_request == request:
            broker.fetch_request = None
            self.on_broker(broker, self.settings.fetch_backoff_ms, self._fetch_step, broker, token)

    def _answer_current(self, broker: Broker, token: int, request: int) -> bool:
        if token != broker.fetch_token or broker.fetch_request != request:
            return False
        broker.fetch_request = None
        return True

    def _serve_offset_for_leader_epoch(self, leader: Broker, replica: int, request: int, token: int,
                                       current_leader_epoch: int, leader_epoch: int) -> None:
        """The leader's side: offset_for_leader_epoch.end_offset, as the handler calls it."""
        answer = offset_for_leader_epoch.end_offset(leader.partition, current_leader_epoch, leader_epoch)
        follower = self.brokers[replica]
        self.send(leader.id, replica, self._offset_for_leader_epoch_answered, follower, request, token,
                  leader_epoch, answer)

    def _offset_for_leader_epoch_answered(self, broker: Broker, request: int, token: int, asked: int,
                                          answer: dict[str, Any]) -> None:
        if not self._answer_current(broker, token, request):
            return
        if answer["error_code"] != ErrorCode.none:
            self.on_broker(broker, self.settings.fetch_backoff_ms, self._fetch_step, broker, token)
            return
        log, p = broker.log, broker.partition
        answered_epoch, answered_end = answer["leader_epoch"], answer["end_offset"]
        if self.settings.truncation == "legacy":
            completed = True
            if answered_epoch == UNDEFINED_EPOCH or log.latest_epoch == UNDEFINED_EPOCH:
                end = p.high_watermark
            else:
                own_epoch, own_end = log.end_offset_for_epoch(answered_epoch)
                end = min(answered_end, own_end) if own_epoch == answered_epoch else answered_end
            kafka = follower_truncation(log, answered_epoch, answered_end, p.high_watermark)
            if min(end, log.log_end_offset) != kafka.offset or not kafka.completed:
                self.suspect = "defect2"  # Kafka's fetcher would have truncated elsewhere
            if end < log.log_end_offset:
                log.truncate_to(end)
                self.log_event("broker %d: truncated to %d (legacy rule; Kafka's: %s)", (broker.id, end, kafka))
        else:
            state = follower_truncation(log, answered_epoch, answered_end, p.high_watermark)
            before = log.log_end_offset
            log.truncate_to(state.offset)
            completed = state.completed
            self.log_event("broker %d: asked epoch %d, leader %s: %s (leo %d -> %d)", (
                broker.id, asked, (answered_epoch, answered_end), state, before, log.log_end_offset))
        if self.settings.restart_high_watermark == "checkpoint":
            broker.hw_checkpoint = log.high_watermark  # LogManager checkpoints after a truncation
        if completed:
            broker.phase = "fetch"
        self.on_broker(broker, 0, self._fetch_step, broker, token)

    def _serve_fetch(self, leader: Broker, replica: int, request: int, token: int, fetch_offset: int,
                     current_leader_epoch: int, max_records: int, sent_at: int, parked: int = 0) -> None:
        """The leader's side of a follower fetch (fetch.py's _read_all and long poll)."""
        p, log = leader.partition, leader.log
        if parked and leader.parked.pop(parked, None) is None:
            return  # already answered
        refusal = fetch_api._refusal(p, replica, current_leader_epoch)
        follower = self.brokers[replica]
        if refusal is not None:
            self.send(leader.id, replica, self._fetch_answered, follower, request, token, refusal, fetch_offset, [], -1)
            return
        if not self.settings.follower_position_after_read:
            p.follower_fetched(replica, fetch_offset, self.now)
        try:
            records = log.read(fetch_offset, max_records, upper_bound=log.log_end_offset)
        except OffsetOutOfRangeError as exc:
            self.send(leader.id, replica, self._fetch_answered, follower, request, token, error_code_for(exc),
                      fetch_offset, [], -1)
            return
        if self.settings.follower_position_after_read:
            p.follower_fetched(replica, fetch_offset, self.now)
        if not records and self.now < sent_at + self.settings.fetch_max_wait_ms:
            self._next_request += 1
            key = self._next_request
            leader.parked[key] = (replica, request, token, fetch_offset, current_leader_epoch, max_records, sent_at)
            self.on_broker(leader, sent_at + self.settings.fetch_max_wait_ms - self.now, self._serve_fetch, leader,
                           replica, request, token, fetch_offset, current_leader_epoch, max_records, sent_at - 10**9,
                           key)
            return
        self.send(leader.id, replica, self._fetch_answered, follower, request, token, ErrorCode.none, fetch_offset,
                  records, p.high_watermark)

    def _wake_fetches(self, leader: Broker) -> None:
        """An append wakes the followers' long polls (Partition.watch(appends=True))."""
        for key, (replica, request, token, offset, epoch, max_records, sent_at) in list(leader.parked.items()):
            self.on_broker(leader, 0, self._serve_fetch, leader, replica, request, token, offset, epoch,
                           max_records, sent_at - 10**9, key)

    def _fetch_answered(self, broker: Broker, request: int, token: int, code: ErrorCode, fetch_offset: int,
                        records: list[Record], high_watermark: int) -> None:
        if not self._answer_current(broker, token, request):
            return
        if code == ErrorCode.offset_out_of_range:
            broker.phase = "truncate"
            self.on_broker(broker, 0, self._fetch_step, broker, token)
            return
        if code != ErrorCode.none:
            self.on_broker(broker, self.settings.fetch_backoff_ms, self._fetch_step, broker, token)
            return
        p, log = broker.partition, broker.log
        if records:
            try:
                log.append_as_follower(fetch_offset, records)
            except UnexpectedAppendOffsetError:
                self.on_broker(broker, self.settings.fetch_backoff_ms, self._fetch_step, broker, token)
                return
            self._mark_replicated(broker)
        p.leader_high_watermark(high_watermark)
        self.on_broker(broker, 0, self._fetch_step, broker, token)

    # -- producers ------------------------------------------------------------------------------

    def _produce_next(self, producer: int) -> None:
        state = self.producers[producer]
        if not self.producing:
            return
        state["n"] += 1
        state["value"] = f"p{producer}.{state['n']}"
        state["attempt"] = 0
        self._produce_send(producer)

    def _produce_send(self, producer: int) -> None:
        state = self.producers[producer]
        if not self.producing and not state.get("txn"):  # a transaction is finished after the faults
            return
        state["attempt"] += 1
        attempt = state["attempt"]
        leader = self.brokers[state["leader"]]
        self.send(CLIENT, leader.id, self._serve_produce, leader, producer, attempt, state["value"], state.get("batch"))
        self.at(self.settings.produce_timeout_ms + 200, self._produce_timed_out, producer, attempt)

    def _produce_timed_out(self, producer: int, attempt: int) -> None:
        state = self.producers[producer]
        if state["attempt"] == attempt:
            self._produce_answered(producer, attempt, ErrorCode.request_timed_out, -1)

    def _serve_produce(self, broker: Broker, producer: int, attempt: int, value: str,
                       batch: tuple[int, int, int] | None = None) -> None:
        """produce.handle for one partition, acks=all; `batch` (producer id, epoch, sequence) for
        a transactional producer's batch, appended by UnifiedLog.append."""
        p = broker.partition
        if not p.is_leader:
            self._reply_produce(broker, producer, attempt, ErrorCode.not_leader_or_follower, -1)
            return
        if len(p.isr) < MIN_INSYNC:
            self._reply_produce(broker, producer, attempt, ErrorCode.not_enough_replicas, -1)
            return
        if batch is None:
            offset = broker.log.append(value, leader_epoch=p.leader_epoch)
        else:
            pid, epoch, seq = batch
            try:
                info = broker.log.append_batches(build_batch(
                    [(None, value.encode(), (), self.now)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                    is_transactional=True), leader_epoch=p.leader_epoch, now_ms=self.now)
            except Exception as exc:  # noqa: BLE001 - the partition's error code, as produce.py answers it
                self.log_event("broker %d: %s refused: %r", (broker.id, value, exc))
                self.stats["txn_refused_" + error_code_for(exc).name] += 1
                self._reply_produce(broker, producer, attempt, error_code_for(exc), -1)
                return
            offset = info.first_offset
            if info.duplicate:  # answered with the original's offset once that is committed
                self.log_event("broker %d: %s is a duplicate of offset %d", (broker.id, value, offset))
                self.stats["txn_duplicates"] += 1
        if batch is None or not info.duplicate:
            self._schedule_flush(broker)
            p.appended()
            self._wake_fetches(broker)
            self.log_event("broker %d: appended %s at %d, epoch %d", (broker.id, value, offset, p.leader_epoch))
        # produce.py waits once every partition of the request is appended, under the append's epoch.
        future = p.wait_for_high_watermark(offset + 1, p.leader_epoch)
        broker.pending.append(Pending(future, offset, value, p.leader_epoch,
                                      self.now + self.settings.produce_timeout_ms, producer, attempt,
                                      broker.leadership))
        self.on_broker(broker, self.settings.produce_timeout_ms, self._answer_waiters, broker)

    def _answer_waiters(self, broker: Broker) -> None:
        """produce.py's _wait_committed for every waiting produce that is done or timed out."""
        broker.waiter_check_scheduled = False
        still = []
        for pending in broker.pending:
            if pending.future.done():
                exc = pending.future.exception()
                if exc is not None:
                    code = error_code_for(exc)
                elif pending.kind == "marker":  # txn_markers._committed: replicated is enough
                    code = ErrorCode.none
                    self._acknowledged(broker, pending)
                elif len(broker.partition.isr) < MIN_INSYNC:
                    code = ErrorCode.not_enough_replicas_after_append
                else:
                    code = ErrorCode.none
                    self._acknowledged(broker, pending)
                self._reply_produce(broker, pending.producer, pending.attempt, code, pending.offset, pending.kind)
            elif self.now >= pending.deadline:
                pending.future.cancel()
                self._reply_produce(broker, pending.producer, pending.attempt, ErrorCode.request_timed_out, -1,
                                    pending.kind)
            else:
                still.append(pending)
        broker.pending = still

    def _reply_produce(self, broker: Broker, producer: int, attempt: int, code: ErrorCode, offset: int,
                       kind: str = "produce") -> None:
        answered = self._marker_answered if kind == "marker" else self._produce_answered
        self.send(broker.id, CLIENT, answered, producer, attempt, code, offset)

    def _produce_answered(self, producer: int, attempt: int, code: ErrorCode, offset: int) -> None:
        state = self.producers[producer]
        if state.get("txn"):
            self._txn_produce_answered(producer, attempt, code, offset)
            return
        if state["attempt"] != attempt:
            return
        state["attempt"] += 1  # later answers to this attempt are stale
        if code == ErrorCode.none:
            self.stats["acked"] += 1
            self.at(self.rng.randint(5, 60), self._produce_next, producer)
            return
        self.stats["produce_" + code.name] += 1
        up = [b for b in self.brokers.values() if b.up and b.view is not None]
        if up:  # metadata from some broker's view
            view = self.rng.choice(up).view
            if view.leader >= 0:
                state["leader"] = view.leader
        state["attempt"] -= 1
        self.at(self.rng.randint(10, 80), self._produce_send, producer)

    def _refresh_leader(self, state: dict[str, Any]) -> None:
        up = [b for b in self.brokers.values() if b.up and b.view is not None]
        if up:  # metadata from some broker's view
            view = self.rng.choice(up).view
            if view.leader >= 0:
                state["leader"] = view.leader

    # -- transactional producers and their coordinator --------------------------------------------

    def _txn_begin(self, producer: int) -> None:
        """A transaction: 1-3 batches, each acknowledged before the next, then the coordinator's
        COMMIT (or ABORT) marker. A producer whose previous marker was sent more than once (a
        copy may still be on its way) starts with a new epoch, which fences that copy."""
        state = self.producers[producer]
        if not self.producing:
            return
        if state["bump"]:
            state["epoch"] += 1
            state["seq"] = 0
            state["bump"] = False
        state["n"] += 1
        state.update(batches=self.rng.randint(1, 3), i=0, failed=False, open=True)
        self.txns[(producer, state["n"])] = {"outcome": None, "offsets": [], "marker_acked": False}
        self._txn_next_batch(producer)

    def _txn_next_batch(self, producer: int) -> None:
        state = self.producers[producer]
        state["i"] += 1
        state["value"] = f"t{producer}.{state['n']}.{state['i']}"
        state["batch"] = (state["pid"], state["epoch"], state["seq"])
        state["tries"] = 0
        self._produce_send(producer)

    def _txn_produce_answered(self, producer: int, attempt: int, code: ErrorCode, offset: int) -> None:
        state = self.producers[producer]
        if state["attempt"] != attempt:
            return
        state["attempt"] += 1
        if code == ErrorCode.none:
            self.stats["txn_acked"] += 1
            self.txns[(producer, state["n"])]["offsets"].append(offset)
            state["seq"] += 1
            self.at(self.rng.randint(1, 20), self._txn_next_batch if state["i"] < state["batches"] else self._txn_end,
                    producer)
            return
        self.stats["txn_produce_" + code.name] += 1
        state["tries"] += 1
        if code in _RETRIABLE and state["tries"] < 3:
            self._refresh_leader(state)
            self.at(self.rng.randint(10, 80), self._produce_send, producer)
        else:  # the transaction aborts
            state["failed"] = True
            self.at(self.rng.randint(1, 30), self._txn_end, producer)

    def _txn_end(self, producer: int) -> None:
        """EndTxn: the coordinator decides and sends the marker. An abort after a failed batch
        bumps the producer's epoch (KIP-360), so that batch, if still on its way, is fenced;
        now and then the coordinator has moved (a new coordinator epoch)."""
        state = self.producers[producer]
        commit = not state["failed"] and self.rng.random() >= TXN_ABORT_RATE
        self.txns[(producer, state["n"])]["outcome"] = "commit" if commit else "abort"
        if state["failed"]:
            state["epoch"] += 1
            state["seq"] = 0
        if self.rng.random() < 0.1:
            state["coordinator_epoch"] += 1
        state["marker"] = (state["pid"], state["epoch"], commit, state["coordinator_epoch"])
        state["marker_sends"] = 0
        self.log_event("coordinator: %s transaction %d of producer %d, marker %s", (
            "commits" if commit else "aborts", state["n"], producer, state["marker"]))
        self._marker_send(producer)

    def _marker_send(self, producer: int) -> None:
        """WriteTxnMarkers to the partition's leader as the coordinator knows it."""
        state = self.producers[producer]
        state["attempt"] += 1
        attempt = state["attempt"]
        state["marker_sends"] += 1
        if state["marker_sends"] > 1:
            state["bump"] = True
        leader = self.brokers[state["leader"]]
        if self.faults_on and self.rng.random() < 0.08:
            # A copy of this marker arrives late, after the marker was written again and maybe
            # after the producer's next transaction began: either the coordinator moved (its
            # __transaction_state partition has a new leader, coordinator epoch + 1) with the
            # marker queued, or the leader read the request only after a stall, when the
            # coordinator had timed it out and sent it again. Only the epochs fence it.
            moved = self.rng.random() < 0.5
            self.log_event("coordinator: %s with marker %s of producer %d", (
                "moves" if moved else "times out", state["marker"], producer))
            self.at(self.rng.randint(100, 1500), self.send, CLIENT, leader.id, self._serve_marker, leader, producer,
                    -1, state["marker"])
            if moved:
                pid, epoch, commit, coordinator_epoch = state["marker"]
                state["coordinator_epoch"] = coordinator_epoch + 1
                state["marker"] = (pid, epoch, commit, coordinator_epoch + 1)
            state["bump"] = True
        self.send(CLIENT, leader.id, self._serve_marker, leader, producer, attempt, state["marker"])
        self.at(self.settings.produce_timeout_ms + 200, self._marker_timed_out, producer, attempt)

    def _marker_timed_out(self, producer: int, attempt: int) -> None:
        if self.producers[producer]["attempt"] == attempt:
            self._marker_answered(producer, attempt, ErrorCode.request_timed_out, -1)

    def _serve_marker(self, broker: Broker, producer: int, attempt: int, marker: tuple[int, int, bool, int]) -> None:
        """txn_markers._append for one partition: the leader appends the control batch with
        UnifiedLog.append_marker and answers once the high watermark passes it."""
        p = broker.partition
        if not p.is_leader:
            self._reply_produce(broker, producer, attempt, ErrorCode.not_leader_or_follower, -1, "marker")
            return
        pid, epoch, commit, coordinator_epoch = marker
        try:
            info, completed = broker.log.append_marker(pid, epoch, commit, coordinator_epoch,
                                                       leader_epoch=p.leader_epoch, now_ms=self.now)
        except Exception as exc:  # noqa: BLE001 - the partition's error code
            self.log_event("broker %d: marker %s refused: %r", (broker.id, marker, exc))
            self.stats["marker_refused_" + error_code_for(exc).name] += 1
            self._reply_produce(broker, producer, attempt, error_code_for(exc), -1, "marker")
            return
        offset = info.last_offset
        value = broker.log.records[offset].value
        self.stats["markers_appended" if completed is not None else "markers_completing_nothing"] += 1
        self._schedule_flush(broker)
        p.appended()
        self._wake_fetches(broker)
        self.log_event("broker %d: appended %s at %d, epoch %d, completing %s", (
            broker.id, value, offset, p.leader_epoch, completed))
        future = p.wait_for_high_watermark(offset + 1, p.leader_epoch)
        broker.pending.append(Pending(future, offset, value, p.leader_epoch,
                                      self.now + self.settings.produce_timeout_ms, producer, attempt,
                                      broker.leadership, kind="marker"))
        self.on_broker(broker, self.settings.produce_timeout_ms, self._answer_waiters, broker)

    def _marker_answered(self, producer: int, attempt: int, code: ErrorCode, offset: int) -> None:
        state = self.producers[producer]
        if state["attempt"] != attempt:
            return
        state["attempt"] += 1
        if code == ErrorCode.none:
            self.stats["markers_acked"] += 1
            self.txns[(producer, state["n"])]["marker_acked"] = True
            state["open"] = False
            self.at(self.rng.randint(5, 60), self._txn_begin, producer)
            return
        self.stats["marker_" + code.name] += 1
        if code in (ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced):
            self.violation("the coordinator's current marker is never fenced",
                           f"marker {state['marker']} of producer {producer} refused: {code.name}")
        self._refresh_leader(state)
        self.at(self.rng.randint(10, 80), self._marker_send, producer)

    def _read_committed(self, broker: Broker, lso: int) -> None:
        """A read_committed consumer fetching from the reader's position up to the leader's last
        stable offset: the batches, and the aborted transactions the fetch returns
        (collect_aborted_transactions); it drops a producer's batches from an aborted
        transaction's first offset until its ABORT marker, and every control batch (the
        consumer's rule). Shown: records of committed transactions only, and all of them."""
        log = broker.log
        start = self.reader_pos
        aborted = sorted(log.collect_aborted_transactions(start, lso), key=lambda a: a.first_offset)
        i = 0
        dropping: set[int] = set()
        for offset in range(start, lso):
            record = log.records[offset]
            h = record.header
            if h is None:
                continue
            if record.is_marker:
                if not read_marker(record.marker).committed:
                    dropping.discard(h.producer_id)
                continue
            while i < len(aborted) and aborted[i].first_offset <= h.last_offset:
                dropping.add(aborted[i].producer_id)
                i += 1
            shown = h.producer_id not in dropping
            name, n, _ = record.value.split(".")
            outcome = self.txns.get((int(name[1:]), int(n)), {}).get("outcome")
            if shown:
                self.visible.add(offset)
                if outcome != "commit":
                    self.violation("a read_committed reader sees no record of an aborted or undecided transaction",
                                   f"{record.value} at offset {offset} (transaction {outcome or 'undecided'}) is "
                                   f"shown by leader {broker.id} below its last stable offset {lso}; aborted "
                                   f"transactions returned: {aborted}")
            elif outcome == "commit":
                self.violation("a read_committed reader sees every record of a committed transaction",
                               f"{record.value} at offset {offset} of a committed transaction is dropped by leader "
                               f"{broker.id}'s aborted transactions {aborted}")
        self.reader_pos = lso

    # -- faults -----------------------------------------------------------------------------------

    def _fault_gap(self) -> int:
        return int(self.rng.expovariate(1 / self.fault_mean_ms)) + 1

    def _calm(self) -> bool:
        # A controlled shutdown still on its way is a failure too: it takes its broker out of
        # the ISR, which may leave only the one that lost records in it.
        return (not self.blocked and not self.slow
                and all(b.up and not b.paused and b.shutdown_request is None for b in self.brokers.values()))

    def _power_loss_outstanding(self) -> bool:
        return any(b.power_lost for b in self.brokers.values())

    def _inject_fault(self) -> None:
        if not self.faults_on:
            return
        self.at(self._fault_gap(), self._inject_fault)
        rng = self.rng
        kind = rng.choice(["cut", "cut", "zk_cut", "zk_cut", "isolate", "slow", "slow", "pause", "kill", "power",
                           "clean", "preferred", "preferred", "preferred", "flap", "flap", "flap", "flap"])
        broker = self.brokers[rng.choice(REPLICAS)]
        other = self.brokers[rng.choice([b for b in REPLICAS if b != broker.id])]
        if kind == "preferred":
            self._ask_preferred_election()
            return
        if self._power_loss_outstanding():
            if kind == "slow":
                pass
            else:
                return  # one lossy failure at a time: nothing else until it is back in the ISR
        if kind == "flap":
            self._flap()
        elif kind == "cut" or kind == "zk_cut" or kind == "isolate":
            pairs = {"cut": [frozenset((broker.id, other.id))], "zk_cut": [frozenset((broker.id, ZK))],
                     "isolate": [frozenset((broker.id, b)) for b in (ZK, *REPLICAS) if b != broker.id]}[kind]
            pairs = [pair for pair in pairs if pair not in self.blocked]
            duration = rng.randint(50, 2000)
            self.log_event("fault: %s %s for %d ms", (kind, [sorted(p) for p in pairs], duration))
            self.blocked.update(pairs)
            self.at(duration, self._unblock, pairs)
        elif kind == "slow":
            pair = frozenset((broker.id, rng.choice([b for b in (ZK, *REPLICAS) if b != broker.id])))
            extra = rng.choice([20, 80, 200, 500])
            duration = rng.randint(50, 2000)
            self.log_event("fault: slow link %s +%d ms for %d ms", (sorted(pair), extra, duration))
            self.slow[pair] = extra
            self.at(duration, self.slow.pop, pair, None)
        elif kind == "pause":
            if not broker.up or broker.paused:
                return
            duration = rng.randint(50, 2000)
            self.log_event("fault: pause broker %d for %d ms", (broker.id, duration))
            broker.paused = True
            self.at(duration, self._resume, broker, broker.incarnation)
        elif kind in ("kill", "power"):
            if not broker.up or (kind == "power" and not self._calm()):
                return
            broker.stopped_how = kind
            self._stop(broker, kind)
            self.at(rng.randint(20, 1500), self._restart, broker)
        elif kind == "clean":
            if not broker.up or broker.paused or broker.shutting_down:
                return
            self._controlled_shutdown(broker)

    def _ask_preferred_election(self) -> None:
        """ElectLeaders, through /admin/preferred_replica_election."""
        controller = self._controller_broker()
        if controller is not None:
            self.log_event("fault: preferred leader election asked", ())
            self.send(ZK, controller.id, self._controller_event, controller, "preferred")

    def _flap(self) -> None:
        """Leaderships changing faster than followers catch up (KIP-279's "fast leader changes"):
        the leader L is cut from the preferred replica P, P is elected while L still holds records
        P never fetched, then P loses its ZooKeeper session while L is still in the ISR, so L may
        lead again with records P never had, and P with records L never had."""
        state = self.zk.partition_state(TOPIC, INDEX)
        rng = self.rng
        if state is None or state.leader < 0:
            return
        preferred = REPLICAS[0]
        if state.leader == preferred:  # move it away first: the preferred replica loses its session
            pairs = [frozenset((preferred, ZK))]
        else:
            pairs = [frozenset((state.leader, preferred))]
            self.at(rng.randint(50, 300), self._ask_preferred_election)
            zk_pair = [frozenset((preferred, ZK))]
            self.at(rng.randint(300, 700), self._cut, zk_pair, rng.randint(self.settings.session_timeout_ms,
                                                                         2 * self.settings.session_timeout_ms))
        self.log_event("fault: flap around leader %d", (state.leader,))
        self._cut(pairs, rng.randint(800, 2500))

    def _cut(self, pairs: list[frozenset[int]], duration: int) -> None:
        pairs = [pair for pair in pairs if pair not in self.blocked]
        if self.faults_on and pairs:
            self.log_event("fault: cut %s for %d ms", ([sorted(p) for p in pairs], duration))
            self.blocked.update(pairs)
            self.at(duration, self._unblock, pairs)

    def _unblock(self, pairs: list[frozenset[int]]) -> None:
        for pair in pairs:
            self.blocked.discard(pair)

    def _resume(self, broker: Broker, incarnation: int) -> None:
        if broker.incarnation != incarnation or not broker.paused:
            return
        self.log_event("broker %d: resumed", (broker.id,))
        broker.paused = False
        backlog, broker.backlog = broker.backlog, []
        for fn, args in backlog:  # each its own step, in the order they came
            self.at(0, self._broker_event, broker, broker.incarnation, fn, args)

    def _restart(self, broker: Broker) -> None:
        if not broker.up:
            self._start(broker)

    def _controlled_shutdown(self, broker: Broker) -> None:
        """ClusterLink.stop: ask the controller to move leaderships away, then stop (bounded)."""
        self.log_event("fault: controlled shutdown of broker %d", (broker.id,))
        self._next_request += 1
        request = self._next_request
        broker.shutdown_request = request
        if broker.session is None or not broker.registered:  # shutdown.py needs the session: stop at once
            self._shutdown_answered(broker, request)
            return

        def op() -> None:  # the request znode, which the controller's watch sees
            controller = self._controller_broker()
            if controller is not None:
                self.notify(controller, self._controller_event, controller, "shutdown", broker.id, request)
        self.zk_call(broker, op, lambda result: None)
        self.on_broker(broker, 2 * self.settings.request_timeout_ms, self._shutdown_answered, broker, request)

    def _shutdown_answered(self, broker: Broker, request: int) -> None:
        if broker.shutdown_request != request:
            return
        broker.shutdown_request = None
        broker.shutting_down = True  # no role change any more
        self._stop_following(broker)
        broker.stopped_how = "clean"
        self._stop(broker, "clean")
        self.at(self.rng.randint(20, 1500), self._restart, broker)

    def _heal(self) -> None:
        """End of the faults: every link back, every broker running; producers stop sending."""
        self.log_event("heal", ())
        self.faults_on = False
        self.producing = False
        self.blocked.clear()
        self.slow.clear()
        self.drop_rate = 0.0
        for broker in self.brokers.values():
            if broker.up and broker.paused:
                self._resume(broker, broker.incarnation)
            if not broker.up:
                self._start(broker)

    # -- invariants -------------------------------------------------------------------------------

    def _became_leader(self, broker: Broker, epoch: int) -> None:
        known = self.leader_of_epoch.setdefault(epoch, broker.id)
        if broker.power_lost:  # not out of the ISR and back since it lost records: see CAUSES
            self.suspect = self.suspect or "leader-after-power-loss"
        if known != broker.id:
            self.violation("at most one leader per epoch", f"broker {broker.id} leads epoch {epoch}, which "
                           f"broker {known} led")
        log = broker.log
        for offset, (value, acked_in, by, (leader_isr, isr_in_zk)) in self.acked.items():
            if acked_in > epoch:
                continue  # a leadership the controller already replaced, acting late: it commits nothing
            if offset >= log.log_end_offset or log.records[offset].value != value:
                found = log.records[offset].value if offset < log.log_end_offset else None
                cause = None
                if broker.id not in leader_isr:  # elected from ZooKeeper's ISR, not counted by the acker
                    cause = "isr-write-unseen"
                elif broker.power_lost:
                    cause = "leader-after-power-loss"
                self.violation("acknowledged records are on every later leader",
                               f"broker {broker.id} leads epoch {epoch} with {found!r} at offset {offset}, "
                               f"where {value!r} was acknowledged by broker {by} (ISR {sorted(leader_isr)} there, "
                               f"{list(isr_in_zk)} in ZooKeeper)", cause)

    def _acknowledged(self, broker: Broker, pending: Pending) -> None:
        self.log_event("broker %d: acknowledged %s at %d (appended in epoch %d)", (
            broker.id, pending.value, pending.offset, pending.epoch))
        leading, leadership, epoch = pending.completed_as
        if not leading or leadership != pending.leadership:
            self.violation("acks=all succeeds only within the leadership it appended in",
                           f"broker {broker.id} appended {pending.value!r} at offset {pending.offset} as leader "
                           f"of epoch {pending.epoch}; its wait completed as {'leader' if leading else 'follower'} "
                           f"of epoch {epoch}, {'a later' if leadership != pending.leadership else 'the same'} "
                           f"leadership", "defect1", fatal=False, suspect=False)
        cause = "defect1" if not leading or leadership != pending.leadership else None
        previous = self.acked.get(pending.offset)
        if previous is not None and previous[0] != pending.value:
            self.violation("acknowledged records are on every later leader",
                           f"{pending.value!r} acknowledged at offset {pending.offset}, where {previous[0]!r} was",
                           cause)
        committed = self.committed[pending.offset].value if pending.offset < len(self.committed) else None
        if committed != pending.value:
            self.violation("acknowledged records are committed",
                           f"broker {broker.id} acknowledged {pending.value!r} at offset {pending.offset} "
                           f"(appended in epoch {pending.epoch}), where the committed record is {committed!r}",
                           cause)
        self.acked[pending.offset] = (pending.value, pending.epoch, broker.id, pending.isr_then)

    def check(self) -> None:
        """After every step: replicas agree below their high watermarks (the leaders' extend the
        committed log, a follower's may only reach into it), a leader's high watermark never goes
        back within its epoch, and one alone in the ISR moves it over fsynced records only."""
        if not self._touched:
            return
        committed = self.committed
        touched, self._touched = self._touched, set()
        for broker in sorted(touched, key=lambda b: b.id):
            p = broker.partition
            if not broker.up or p is None:
                continue
            log = broker.log
            hw = log.high_watermark
            start = min(self.verified[broker.id], log.modified_from)
            for offset in range(start, hw):
                record = log.records[offset]
                if offset < len(committed):
                    if committed[offset] != record:
                        self.violation("replicas are identical below the high watermark",
                                       f"broker {broker.id} has {record} at offset {offset} below its high "
                                       f"watermark {hw}, the committed record is {committed[offset]}")
                elif p.is_leader:
                    committed.append(record)
                else:
                    self.violation("replicas are identical below the high watermark",
                                   f"follower {broker.id}'s high watermark {hw} is past every leader's "
                                   f"({len(committed)}): {record} at offset {offset} was never committed")
            self.verified[broker.id] = hw
            log.modified_from = log.log_end_offset
            if p.is_leader:
                key = (broker.id, broker.incarnation, p.leader_epoch)
                previous = self.hw_seen.get(key)
                if previous is not None and hw < previous:
                    self.violation("the high watermark never goes back within an epoch",
                                   f"leader {broker.id} epoch {p.leader_epoch}: {previous} -> {hw}")
                if (previous is not None and hw > previous and p.isr == frozenset((broker.id,))
                        and hw > max(previous, log.recovery_point)):
                    self.violation("a leader alone in the ISR commits only fsynced records",
                                   f"leader {broker.id} epoch {p.leader_epoch} moved its high watermark "
                                   f"{previous} -> {hw} over records fsynced only below {log.recovery_point}",
                                   "defect8", fatal=False)
                self.hw_seen[key] = hw
            if not self.transactions:
                continue
            lso = log.last_stable_offset
            if lso > hw:
                self.violation("the last stable offset is never above the high watermark",
                               f"broker {broker.id}: last stable offset {lso}, high watermark {hw}")
            if p.is_leader:
                key = (broker.id, broker.incarnation, p.leader_epoch)
                previous = self.lso_seen.get(key)
                if previous is not None and lso < previous:
                    self.violation("the last stable offset never goes back on a leader within its epoch",
                                   f"leader {broker.id} epoch {p.leader_epoch}: {previous} -> {lso}")
                self.lso_seen[key] = lso
                if lso > self.reader_pos:
                    self._read_committed(broker, lso)

    def check_converged(self, quiet: bool = False) -> None:
        """After the faults and a quiet time: one leader, every replica in its ISR with the same
        log, every acknowledged record in it at its offset (`quiet`: _NotYet if not yet)."""
        def fail(invariant: str, detail: str) -> None:
            if quiet:
                raise _NotYet()
            self.violation(invariant, detail)

        leaders = [b for b in self.brokers.values() if b.up and b.partition is not None and b.partition.is_leader]
        state = self.zk.partition_state(TOPIC, INDEX)
        if state is None or state.leader < 0 or len(leaders) != 1 or leaders[0].id != state.leader:
            fail("the cluster converges after the faults", f"leaders {[b.id for b in leaders]}, ZooKeeper {state}")
        leader = leaders[0]
        reference = leader.log.records
        for broker in self.brokers.values():
            if broker.log.records != reference or broker.log.high_watermark != len(reference):
                fail("the cluster converges after the faults", f"broker {broker.id} does not match leader {leader.id}")
        if sorted(state.isr) != list(REPLICAS):
            fail("the cluster converges after the faults", f"ISR {state.isr}")
        if quiet and (any(b.pending for b in self.brokers.values())
                      or any(s.get("open") for s in self.producers.values())):
            raise _NotYet()
        for broker in self.brokers.values():  # markers included in the logs compared above
            log = broker.log
            if log.aborted != leader.log.aborted:
                self.violation("replicas agree on the aborted transactions once caught up",
                               f"broker {broker.id}: {log.aborted}, leader {leader.id}: {leader.log.aborted}")
            if log.last_stable_offset != log.high_watermark:
                fail("every transaction is decided once the producers are done",
                     f"broker {broker.id}: last stable offset {log.last_stable_offset}, high watermark "
                     f"{log.high_watermark}, ongoing {log.producer_state.ongoing_txns}")
            if producer_summary(log.producer_state) != producer_summary(leader.log.producer_state):
                self.violation("replicas agree on producer state once caught up",
                               f"broker {broker.id}: {producer_summary(log.producer_state)}, leader {leader.id}: "
                               f"{producer_summary(leader.log.producer_state)}")
        if leader.log.last_stable_offset > self.reader_pos:
            self._read_committed(leader, leader.log.last_stable_offset)
        for (producer, n), txn in self.txns.items():
            if txn["outcome"] == "commit" and txn["marker_acked"]:
                hidden = [o for o in txn["offsets"] if o not in self.visible]
                if hidden:
                    self.violation("a read_committed reader sees every record of a committed transaction",
                                   f"transaction {n} of producer {producer}: offsets {hidden} never shown")
        for offset, (value, *_) in self.acked.items():
            if offset >= len(reference) or reference[offset].value != value:
                self.violation("acknowledged records are on every later leader",
                               f"{value!r} acknowledged at offset {offset} is not in the final log")
        self.stats["records"] = len(reference)
        if self.transactions:
            self.stats["aborted"] = len(leader.log.aborted)


def producer_summary(state: ProducerStateManager) -> tuple[dict[int, tuple[int, int, int, int]], dict[int, int]]:
    """What a replica's producer state says: per producer its epoch, its ongoing transaction's
    first offset, coordinator epoch and last sequence; and the ongoing transactions."""
    return ({pid: (e.producer_epoch, e.current_txn_first_offset, e.coordinator_epoch, e.last_seq)
             for pid, e in state.producers.items()}, dict(state.ongoing_txns))


def quiet_logs() -> None:
    """tidemark's own log lines (epoch entries replaced, ...) would flood a run of many seeds."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(50))


def simulate(seed: int, settings: Settings | None = None, trace: bool = False) -> Simulation:
    """Run one seed in a fresh event loop's coroutine (Partition's futures need a running loop)."""
    sim = Simulation(seed, settings, trace)

    async def main() -> None:
        try:
            sim.run()
        except InvariantViolation:
            pass  # in sim.findings
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        if sim.snapshot_root is not None:
            shutil.rmtree(sim.snapshot_root, ignore_errors=True)
    return sim
