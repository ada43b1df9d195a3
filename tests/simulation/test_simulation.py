"""The replication simulation (cluster.py) over many seeds, a replay of one seed, and the checks
that keep the simulation honest: runs are deterministic, the in-memory log agrees with
UnifiedLog, and the simulator does find the defects it is meant to find.

    pytest tests/simulation                              # TIDEMARK_SIM_SEEDS seeds (2,000), 2 processes,
                                                         # and TIDEMARK_SIM_TXN_SEEDS (400) with transactions
    TIDEMARK_SIM_SEED=1234 pytest tests/simulation -k replay -s   # one seed, its whole trace printed

A failure prints the seed, the invariant, the cause the run points at, and the last steps.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
from pathlib import Path

import pytest

from tidemark.log.config import LogConfig
from tidemark.log.unified_log import UnifiedLog
from tidemark.records.batch import build_batch

from .cluster import CAUSES, Settings, quiet_logs, simulate
from .simlog import Record, SimLog

SEEDS = int(os.environ.get("TIDEMARK_SIM_SEEDS", "2000"))
# Seeds run with transactional producers and markers (Settings.transactions): a seed of those
# costs about twice a plain one.
TXN_SEEDS = int(os.environ.get("TIDEMARK_SIM_TXN_SEEDS", "400"))
WORKERS = 2
# Found by this simulator and not fixed yet: reported, tolerated by the seed run, and each kept
# as an expected failure below until fixed (none now).
OPEN_FINDINGS: set[str] = set()


def _run_seeds(seeds: range, transactions: bool = False) -> list[tuple[int, list[tuple[str, str | None, str]]]]:
    """In a worker process: each seed's violations as (invariant, cause, message)."""
    quiet_logs()
    settings = Settings(transactions=transactions)
    out = []
    for seed in seeds:
        sim = simulate(seed, settings)
        out.append((seed, [(v.invariant, v.cause, str(v)) for v in sim.findings]))
    return out


def _run_all(seeds: int, transactions: bool) -> dict[int, list[tuple[str, str | None, str]]]:
    chunk = 50
    ranges = [range(first, min(first + chunk, seeds)) for first in range(0, seeds, chunk)]
    with concurrent.futures.ProcessPoolExecutor(WORKERS) as pool:
        results = {}
        for part in pool.map(_run_seeds, ranges, [transactions] * len(ranges)):
            results.update(part)
    return results


@pytest.fixture(scope="module")
def seed_results() -> dict[int, list[tuple[str, str | None, str]]]:
    return _run_all(SEEDS, transactions=False)


@pytest.mark.timeout(1800)  # a hang guard: 2,000 seeds take 30-40 s of CPU per core, more on a busy machine
def test_seeds_hold_every_invariant(seed_results: dict[int, list[tuple[str, str | None, str]]]) -> None:
    """Every invariant after every step of every seed, but for violations whose run points at a
    finding still open (its own test below expects it)."""
    failures = [(seed, message) for seed, found in seed_results.items()
                for _, cause, message in found if cause not in OPEN_FINDINGS]
    if failures:
        seed, message = failures[0]
        pytest.fail(f"{len(failures)} violations in {len({s for s, _ in failures})} of {SEEDS} seeds; "
                    f"the first:\n{message}", pytrace=False)


@pytest.mark.timeout(1800)  # a hang guard, as above
def test_transactional_seeds_hold_every_invariant() -> None:
    """Issue 25: with transactional producers and the coordinator's markers (lost, retried,
    sent to a new leader, late copies fenced by the epochs), every invariant of the
    replication runs holds, and those of transactions: the last stable offset never above the
    high watermark nor going back on a leader, a read_committed reader shown exactly the
    committed transactions' records, replicas agreeing on markers, aborted transactions,
    producer state and last stable offset once caught up, and a restart loading the producer
    state and .txnindex the replica held."""
    results = _run_all(TXN_SEEDS, transactions=True)
    failures = [(seed, message) for seed, found in results.items() for _, _, message in found]
    if failures:
        seed, message = failures[0]
        pytest.fail(f"{len(failures)} violations in {len({s for s, _ in failures})} of {TXN_SEEDS} transactional "
                    f"seeds; the first:\n{message}", pytrace=False)


def _expected(cause: str) -> list[pytest.MarkDecorator]:
    if cause in OPEN_FINDINGS:
        return [pytest.mark.xfail(reason=f"found by this simulator, not fixed yet: {CAUSES[cause]}", strict=False)]
    return []


@pytest.mark.parametrize("cause", [pytest.param(cause, marks=_expected(cause)) for cause in CAUSES])
def test_no_violation_points_at(cause: str, seed_results: dict[int, list[tuple[str, str | None, str]]]) -> None:
    found = [(seed, message) for seed, violations in seed_results.items()
             for _, c, message in violations if c == cause]
    if found:
        seed, message = found[0]
        pytest.fail(f"{CAUSES[cause]}: {len({s for s, _ in found})} of {SEEDS} seeds; the first:\n{message}",
                    pytrace=False)


def test_replay() -> None:
    """TIDEMARK_SIM_SEED=N: run that one seed with every step traced (use -s to see it);
    TIDEMARK_SIM_TRANSACTIONS=1 with the transactional load."""
    seed = os.environ.get("TIDEMARK_SIM_SEED")
    if seed is None:
        pytest.skip("set TIDEMARK_SIM_SEED to replay a seed")
    quiet_logs()
    sim = simulate(int(seed), Settings(transactions=os.environ.get("TIDEMARK_SIM_TRANSACTIONS") == "1"), trace=True)
    print(sim.format_trace())
    print(sim.describe())
    print(dict(sim.stats))
    if sim.findings:
        pytest.fail("\n\n".join(str(v) for v in sim.findings), pytrace=False)


def test_a_seed_replays_exactly() -> None:
    quiet_logs()
    settings = Settings()
    for seed in (3, 41):
        first, second = simulate(seed, settings, trace=True), simulate(seed, settings, trace=True)
        assert first.format_trace() == second.format_trace()
        assert first.stats == second.stats
        assert first.stats["acked"] > 0
    transactions = Settings(transactions=True)
    first, second = simulate(3, transactions, trace=True), simulate(3, transactions, trace=True)
    assert first.format_trace() == second.format_trace()
    assert first.stats == second.stats
    assert first.stats["markers_acked"] > 0 and first.stats["aborted"] > 0


def test_the_simulator_finds_defect_2_with_the_legacy_truncation_rule() -> None:
    """Issue 23's defect 2, the fetcher's rule before the fix (truncate to the leader's end of an
    epoch the follower does not have), leaves records below the high watermark that differ
    between replicas; Kafka's rule (truncation_state, asked again until it completes) does not.
    The seeds are ones where the simulator's fast leader changes reach that case (found with
    `python -m tests.simulation.run --seeds 0-1500 --truncation legacy --follower-position-before-read`;
    a change to the simulation changes what a seed does: search again then)."""
    quiet_logs()
    legacy = Settings(truncation="legacy", follower_position_after_read=False)
    kafka = Settings(truncation="kafka", follower_position_after_read=False)
    diverging = [seed for seed in LEGACY_DIVERGING_SEEDS
                 if any(v.invariant == "replicas are identical below the high watermark" and v.cause == "defect2"
                        for v in simulate(seed, legacy).findings)]
    assert diverging, f"none of seeds {LEGACY_DIVERGING_SEEDS} diverges any more: search again"
    for seed in diverging:
        assert not any(v.invariant == "replicas are identical below the high watermark"
                       for v in simulate(seed, kafka).findings), seed


# Found with the controller's registration rule (4 of seeds 0-1,500 diverge).
LEGACY_DIVERGING_SEEDS = [177, 283, 671, 1324]


def test_the_simulator_finds_defect_5_when_restarts_take_the_log_end() -> None:
    """Issue 23's defect 5: a replica restarted with its log end as high watermark claims
    records nobody committed."""
    quiet_logs()
    settings = Settings(restart_high_watermark="log_end", follower_position_after_read=False)
    found = {v.cause for seed in range(20) for v in simulate(seed, settings).findings}
    assert "defect5" in found


def test_the_simulator_finds_defect_1_when_waiters_outlive_their_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23's defect 1 with its fix undone: waiters not failed when the leadership they were
    appended under ends. Some seed then acknowledges a record that is not at its offset."""
    from tidemark.replication.partition import Partition
    monkeypatch.setattr(Partition, "_fail_tied_waiters", lambda self, *args, **kwargs: None)
    original = Partition.wait_for_high_watermark

    def untied(self: Partition, target: int, leader_epoch: int | None = None):  # type: ignore[no-untyped-def]
        return self.watch_high_watermark(target)  # any leader's high watermark, as before the fix
    monkeypatch.setattr(Partition, "wait_for_high_watermark", untied)
    assert original is not untied
    quiet_logs()
    settings = Settings()
    harmful = [v for seed in range(200) for v in simulate(seed, settings).findings
               if v.cause == "defect1" and v.invariant != "acks=all succeeds only within the leadership it appended in"]
    assert harmful, "no seed acknowledged a record its offset does not hold"


def _found_with(seeds: list[int], cause: str) -> list[int]:
    quiet_logs()
    return [seed for seed in seeds if any(v.cause == cause for v in simulate(seed).findings)]


def test_the_simulator_finds_isr_write_unseen_without_the_maximal_isr(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the leader counting a replica it adds only once its ISR write comes back (before
    KIP-497's maximal ISR), some seed acknowledges a record that the replica being added lacks,
    and that replica, listed in ZooKeeper, is then elected. The seeds were found with the rule
    undone over seeds 0-9,000 (a change to the simulation changes what a seed does: search
    again then)."""
    from tidemark.replication.partition import Partition
    assert not _found_with(ISR_WRITE_UNSEEN_SEEDS, "isr-write-unseen")
    monkeypatch.setattr(Partition, "isr_write_pending", lambda self, wanted: None)
    assert _found_with(ISR_WRITE_UNSEEN_SEEDS, "isr-write-unseen"), \
        f"none of seeds {ISR_WRITE_UNSEEN_SEEDS} finds it any more: search again"


def test_the_simulator_finds_a_leader_after_power_loss_taking_a_stale_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a restarted broker taking a leadership from any state (not only one written after
    its registration, roles.leads_from), some seed has a broker back from a power loss lead from
    the controller's state of before the restart, without the records it lost."""
    from tidemark.broker.cluster import roles
    assert not _found_with(POWER_LOSS_LEADER_SEEDS, "leader-after-power-loss")
    monkeypatch.setattr(roles, "leads_from", lambda state, registration_czxid: True)
    assert _found_with(POWER_LOSS_LEADER_SEEDS, "leader-after-power-loss"), \
        f"none of seeds {POWER_LOSS_LEADER_SEEDS} finds it any more: search again"


# Found with each rule undone (`python -m tests.simulation.run` has no switch for them: the
# tests monkeypatch the real function the simulation calls).
ISR_WRITE_UNSEEN_SEEDS = [7358, 7631]  # 2 of seeds 0-9,000
POWER_LOSS_LEADER_SEEDS = [1206, 1475, 2661]  # 3 of seeds 0-3,000


# -- transactions: the simulator finds each defect put back ------------------------------------------


def _txn_found(seeds: list[int], invariant: str) -> list[int]:
    quiet_logs()
    settings = Settings(transactions=True)
    return [seed for seed in seeds if any(v.invariant == invariant for v in simulate(seed, settings).findings)]


def test_the_simulator_finds_a_last_stable_offset_taken_from_the_log_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last stable offset computed from the log end instead of the first unstable offset
    (capped by the high watermark) runs past the high watermark."""
    monkeypatch.setattr(SimLog, "last_stable_offset", property(lambda log: log.log_end_offset))
    assert _txn_found(LSO_FROM_LOG_END_SEEDS, "the last stable offset is never above the high watermark")


def test_the_simulator_finds_a_last_stable_offset_that_ignores_open_transactions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the first unstable offset ignored (the last stable offset is the high watermark), a
    read_committed reader is shown records of transactions not decided yet."""
    from tidemark.log.producer_state import ProducerStateManager
    monkeypatch.setattr(ProducerStateManager, "first_unstable_offset", lambda state, high_watermark: None)
    assert _txn_found(LSO_IGNORES_OPEN_SEEDS,
                      "a read_committed reader sees no record of an aborted or undecided transaction")


def test_the_simulator_finds_a_follower_not_tracking_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower that appends the leader's transactional batches and markers without updating
    its producer state (nor its .txnindex) disagrees with its leader once caught up, and leads
    with a wrong last stable offset and aborted list."""
    monkeypatch.setattr(SimLog, "follower_tracks_transactions", False)
    found = [v.invariant for seed in FOLLOWER_UNTRACKED_SEEDS
             for v in simulate(seed, Settings(transactions=True)).findings]
    assert found and {"replicas agree on producer state once caught up",
                      "replicas agree on the aborted transactions once caught up"} & set(found), found


def test_the_simulator_finds_markers_not_fenced_by_producer_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A marker whose producer epoch is older than the partition's written anyway (the
    coordinator epoch still checked): a late copy of a finished transaction's marker completes
    the producer's next transaction early, so a read_committed reader is shown records of an
    aborted transaction or misses some of a committed one."""
    from tidemark.log.producer_state import ProducerStateManager
    check_marker = ProducerStateManager.check_marker

    def coordinator_epoch_only(state: ProducerStateManager, producer_id: int, producer_epoch: int,
                               coordinator_epoch: int) -> None:
        entry = state.producers.get(producer_id)
        check_marker(state, producer_id, entry.producer_epoch if entry else producer_epoch, coordinator_epoch)
    monkeypatch.setattr(ProducerStateManager, "check_marker", coordinator_epoch_only)
    found = [v.invariant for seed in UNFENCED_MARKER_SEEDS
             for v in simulate(seed, Settings(transactions=True)).findings]
    assert {"a read_committed reader sees no record of an aborted or undecided transaction",
            "a read_committed reader sees every record of a committed transaction"} & set(found), found


def test_the_simulator_finds_a_follower_roll_snapshot_missing_the_parts_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25's defect of the follower's append (found while mirroring it): producer state
    updated only after the last part of a fetch response, so the snapshot of a roll between
    parts misses the batches before it, and a restart loading it rebuilds a different state
    (or, led from, a different .txnindex) than the replica held."""
    monkeypatch.setattr(SimLog, "follower_state_per_part", False)
    found = [v.invariant for seed in FOLLOWER_PARTS_SEEDS for v in simulate(seed, Settings(transactions=True)).findings]
    assert {"producer state and aborted transactions rebuilt at a restart are what the replica held",
            "replicas agree on the aborted transactions once caught up"} & set(found), found


# Found with each defect put back (`python -m tests.simulation.run --transactions` over seeds
# 0-100; the first seeds that find it; a change to the simulation changes what a seed does).
LSO_FROM_LOG_END_SEEDS = [0]
LSO_IGNORES_OPEN_SEEDS = [0, 3]
FOLLOWER_UNTRACKED_SEEDS = [0]
UNFENCED_MARKER_SEEDS = [8]
FOLLOWER_PARTS_SEEDS = [82, 119]  # 3 of seeds 0-150


# -- the in-memory log against UnifiedLog -----------------------------------------------------------


def test_simlog_matches_unified_log(tmp_path: Path) -> None:
    """The same appends (as leader and as follower), epoch assignments, truncations and flushes
    on SimLog and on UnifiedLog give the same log end, high watermark, recovery point, latest
    epoch and OffsetForLeaderEpoch answers."""
    rng = random.Random(7)
    real = UnifiedLog.open(tmp_path / "sim-0", LogConfig(), now_ms=0)
    sim = SimLog("sim-0")
    epoch = 0
    try:
        for step in range(400):
            action = rng.choice(["append", "append", "append", "follower", "epoch", "truncate", "hw", "flush"])
            if action == "append":
                sim.append(f"v{step}", leader_epoch=epoch)
                real.append(build_batch([(None, f"v{step}".encode(), (), 0)]), leader_epoch=epoch, now_ms=0)
            elif action == "follower":
                count = rng.randint(1, 3)
                base = sim.log_end_offset
                sim.append_as_follower(base, [Record(epoch, f"f{step}.{i}") for i in range(count)])
                real.append_as_follower(b"".join(
                    build_batch([(None, f"f{step}.{i}".encode(), (), 0)], base_offset=base + i,
                                partition_leader_epoch=epoch) for i in range(count)), now_ms=0)
            elif action == "epoch":
                epoch += rng.randint(1, 2)
                sim.assign_epoch_start_offset(epoch)
                real.assign_epoch_start_offset(epoch)
            elif action == "truncate":
                offset = rng.randint(0, sim.log_end_offset + 2)
                assert sim.truncate_to(offset) == real.truncate_to(offset, now_ms=0)
            elif action == "hw":
                offset = rng.randint(0, sim.log_end_offset + 1)
                assert sim.update_high_watermark(offset) == real.update_high_watermark(offset)
            else:
                assert sim.flush() == real.flush()
            assert (sim.log_end_offset, sim.high_watermark, sim.recovery_point, sim.latest_epoch) == \
                (real.log_end_offset, real.high_watermark, real.recovery_point, real.latest_epoch), step
            for asked in range(-1, epoch + 2):
                assert sim.end_offset_for_epoch(asked) == real.end_offset_for_epoch(asked), (step, asked)
    finally:
        real.close()


def test_simlog_matches_unified_log_with_transactions(tmp_path: Path) -> None:
    """Transactional batches, markers (some fenced by a stale epoch), plain batches, a
    follower's appends of all three, truncations, high watermark moves and clean restarts on
    SimLog and on UnifiedLog give the same last stable offset, aborted transactions (the
    .txnindex and collect_aborted_transactions), producer state and errors."""
    from tidemark.log import errors as log_errors
    from tidemark.records.batch import read_header
    from tidemark.records.control import build_marker_batch

    from .cluster import producer_summary

    rng = random.Random(11)
    (tmp_path / "snapshots").mkdir()
    real = UnifiedLog.open(tmp_path / "sim-0", LogConfig(), now_ms=0)
    sim = SimLog("sim-0", snapshot_dir=tmp_path / "snapshots")
    epoch = 0
    producers = {1001: [0, 0], 1002: [0, 0]}  # producer id -> [epoch, next sequence]

    def both(sim_call, real_call):  # noqa: ANN001, ANN202 - the same outcome, or the same error
        try:
            expected = real_call()
        except (log_errors.InvalidProducerEpochError, log_errors.OutOfOrderSequenceError,
                log_errors.TransactionCoordinatorFencedError, log_errors.InvalidTxnStateError) as exc:
            with pytest.raises(type(exc)):
                sim_call()
            return None
        return expected, sim_call()

    try:
        for step in range(600):
            action = rng.choice(["txn", "txn", "txn", "marker", "marker", "plain", "follower", "epoch", "truncate",
                                 "hw", "hw", "flush", "restart"])
            pid = rng.choice(list(producers))
            p_epoch, seq = producers[pid]
            if action == "txn":
                stale = rng.random() < 0.1 and p_epoch > 0
                batch = build_batch([(None, f"t{step}".encode(), (), step)], producer_id=pid,
                                    producer_epoch=p_epoch - 1 if stale else p_epoch, base_sequence=seq,
                                    is_transactional=True)
                out = both(lambda: sim.append_batches(batch, leader_epoch=epoch, now_ms=step),
                           lambda: real.append(batch, leader_epoch=epoch, now_ms=step))
                if out is not None:
                    assert out[0] == out[1], step
                    producers[pid][1] += 1
            elif action == "marker":
                committed, coordinator_epoch = rng.random() < 0.5, rng.choice([0, 0, 1])
                marker_epoch = p_epoch + rng.choice([-1, 0, 0, 0, 1])
                out = both(lambda: sim.append_marker(pid, marker_epoch, committed, coordinator_epoch,
                                                     leader_epoch=epoch, now_ms=step),
                           lambda: real.append_marker(pid, marker_epoch, committed, coordinator_epoch,
                                                      leader_epoch=epoch, now_ms=step))
                if out is not None:
                    assert out[0] == out[1], step
                    if marker_epoch > p_epoch:
                        producers[pid] = [marker_epoch, 0]
            elif action == "plain":
                sim.append(f"v{step}", leader_epoch=epoch)
                real.append(build_batch([(None, f"v{step}".encode(), (), 0)]), leader_epoch=epoch, now_ms=0)
            elif action == "follower":
                base = sim.log_end_offset
                kind = rng.choice(["plain", "txn", "marker"])
                if kind == "plain":
                    raw = build_batch([(None, f"f{step}".encode(), (), 0)], base_offset=base,
                                      partition_leader_epoch=epoch)
                    record = Record(epoch, f"f{step}")
                elif kind == "txn":
                    raw = build_batch([(None, f"f{step}".encode(), (), step)], base_offset=base, producer_id=pid,
                                      producer_epoch=p_epoch, base_sequence=seq, partition_leader_epoch=epoch,
                                      is_transactional=True)
                    record = Record(epoch, f"f{step}", read_header(raw))
                    producers[pid][1] += 1
                else:
                    raw = build_marker_batch(pid, p_epoch, rng.random() < 0.5, 1, step, base_offset=base,
                                             partition_leader_epoch=epoch)
                    record = Record(epoch, "marker", read_header(raw), raw)
                sim.append_as_follower(base, [record])
                real.append_as_follower(raw, now_ms=step)
            elif action == "epoch":
                epoch += rng.randint(1, 2)
                sim.assign_epoch_start_offset(epoch)
                real.assign_epoch_start_offset(epoch)
            elif action == "truncate":
                offset = rng.randint(max(0, sim.log_end_offset - 6), sim.log_end_offset + 1)
                assert sim.truncate_to(offset) == real.truncate_to(offset, now_ms=step)
                for pid in producers:  # what the logs still hold decides where producers go on
                    entry = real.producer_state.producers.get(pid)
                    producers[pid] = [entry.producer_epoch, entry.last_seq + 1] if entry else [producers[pid][0], 0]
            elif action == "hw":
                offset = rng.randint(sim.high_watermark, sim.log_end_offset)
                assert sim.update_high_watermark(offset) == real.update_high_watermark(offset)
            elif action == "flush":
                assert sim.flush() == real.flush()
            else:  # a clean restart: snapshot at close, loaded at open
                high_watermark = real.high_watermark
                real.close()
                real = UnifiedLog.open(tmp_path / "sim-0", LogConfig(), recovery_point=real.recovery_point,
                                       clean_shutdown=True, high_watermark=high_watermark, now_ms=step)
                sim.close()
                sim = sim.after_crash(rng, power_loss=False, now_ms=step)
                sim.update_high_watermark(high_watermark)
            assert (sim.log_end_offset, sim.high_watermark, sim.last_stable_offset) == \
                (real.log_end_offset, real.high_watermark, real.last_stable_offset), step
            real_aborted = [e for seg in real.segments for e in seg.txn_index.entries]
            assert sim.aborted == real_aborted, step
            start = rng.randint(0, sim.log_end_offset)
            assert sim.collect_aborted_transactions(start, sim.last_stable_offset) == \
                real.collect_aborted_transactions(start, real.last_stable_offset), step
            assert producer_summary(sim.producer_state) == producer_summary(real.producer_state), step
        assert real_aborted and sim.producer_state.ongoing_txns is not None
    finally:
        real.close()


def test_a_power_loss_waits_for_a_controlled_shutdown_in_flight() -> None:
    """The simulator's own rule (one lossy failure at a time): a power loss while another
    broker's controlled shutdown is on its way let the controller take that broker out of the
    ISR, leaving only the one that lost acknowledged records to lead (two failures at once,
    which Kafka does not survive either). Transactional seed 927 did that."""
    quiet_logs()
    assert not simulate(927, Settings(transactions=True)).findings
