"""The transaction coordinator's state machine over an in-memory `__transaction_state`, with a
WriteTxnMarkers double for the partition leaders: producer ids and epochs, fencing, the
Empty -> Ongoing -> Prepare -> Complete cycle, markers and their retries, timeouts, expiry,
loading and failover."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.coordinator.conftest import InMemoryOffsetsTopic, ManualClock
from tests.coordinator.transactions_harness import TxnHarness, run
from tidemark.coordinator.transactions.state import TransactionMetadata
from tidemark.records.transaction_log_schema import TransactionStatus, encode_transaction_key, \
    encode_transaction_value

OK = ErrorCode.none


def test_a_new_transactional_id_gets_a_producer_id_at_epoch_0_then_each_init_bumps_it():
    async def scenario(h: TxnHarness):
        await h.start()
        code, pid, epoch = await h.init("t")
        assert (code, epoch) == (OK, 0)
        assert await h.init("t") == (OK, pid, 1)
        txn, value = h.records()[-1]
        assert (txn, value.producer_id, value.producer_epoch, value.status, value.partitions) == \
            ("t", pid, 1, TransactionStatus.EMPTY, None)
        assert value.transaction_timeout_ms == 60_000

    run(scenario)


def test_commit_writes_prepare_then_markers_then_complete():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        assert await h.add("t", pid, epoch, ("orders", 0), ("orders", 1)) == OK
        assert h.state() == "Ongoing"
        assert await h.add("t", pid, epoch, ("orders", 0)) == OK  # already in: nothing written
        assert len(h.records()) == 2
        assert await h.end("t", pid, epoch, True) == OK
        await h.settle()
        # one WriteTxnMarkers to the leader, carrying both partitions at the coordinator's epoch
        assert h.leaders.marked() == [(1, pid, epoch, True, 0, [("orders", 0), ("orders", 1)])]
        statuses = [value.status for _, value in h.records()]
        assert statuses == [TransactionStatus.EMPTY, TransactionStatus.ONGOING, TransactionStatus.PREPARE_COMMIT,
                            TransactionStatus.COMPLETE_COMMIT]
        assert h.records()[-1][1].partitions == ()
        described = await h.describe()
        assert (described["transaction_state"], described["producer_id"], described["topics"]) == \
            ("CompleteCommit", pid, [])
        # a retried EndTxn of the finished commit succeeds; an abort of it is refused
        assert await h.end("t", pid, epoch, True) == OK
        assert await h.end("t", pid, epoch, False) == ErrorCode.invalid_txn_state
        # the next transaction starts from CompleteCommit
        assert await h.add("t", pid, epoch, ("orders", 2)) == OK
        assert h.state() == "Ongoing"

    run(scenario)


def test_markers_are_batched_per_leader():
    async def scenario(h: TxnHarness):
        await h.start()
        h.leaders.leaders[("orders", 1)] = 2
        _, pid, epoch = await h.init()
        await h.add("t", pid, epoch, ("orders", 0), ("orders", 1), ("audit", 0))
        assert await h.end("t", pid, epoch, False) == OK
        await h.settle()
        by_broker = {broker: partitions for broker, *_, partitions in h.leaders.marked()}
        assert by_broker == {1: [("audit", 0), ("orders", 0)], 2: [("orders", 1)]}
        assert h.state() == "CompleteAbort"

    run(scenario)


def test_requests_that_do_not_match_the_producer_are_refused():
    async def scenario(h: TxnHarness):
        await h.start()
        assert await h.add("unknown", 1, 0, ("orders", 0)) == ErrorCode.invalid_producer_id_mapping
        _, pid, _ = await h.init()
        _, _, epoch = await h.init()
        assert await h.add("t", pid + 1, epoch, ("orders", 0)) == ErrorCode.invalid_producer_id_mapping
        assert await h.add("t", pid, epoch - 1, ("orders", 0)) == ErrorCode.producer_fenced
        assert await h.end("t", pid, epoch, True) == ErrorCode.invalid_txn_state  # Empty: nothing to end
        assert await h.end("t", pid, epoch - 1, True) == ErrorCode.producer_fenced

    run(scenario)


def test_init_while_ongoing_aborts_at_a_fenced_epoch_and_the_retry_gets_the_next():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        await h.add("t", pid, epoch, ("orders", 0))
        h.leaders.answers[("orders", 0)] = [ErrorCode.not_leader_or_follower]  # hold the abort once
        assert await h.init() == (ErrorCode.concurrent_transactions, -1, -1)
        await h.settle()
        prepare = h.records()[-1][1]
        assert (prepare.status, prepare.producer_epoch) == (TransactionStatus.PREPARE_ABORT, epoch + 1)
        assert h.leaders.marked() == [(1, pid, epoch + 1, False, 0, [("orders", 0)])]
        # the old producer is fenced; a new one retries while the abort is unfinished
        assert await h.end("t", pid, epoch, True) == ErrorCode.producer_fenced
        assert await h.init() == (ErrorCode.concurrent_transactions, -1, -1)
        h.clock.advance(100)  # the marker's retry back-off
        await h.settle()
        assert h.state() == "CompleteAbort"
        assert await h.init() == (OK, pid, epoch + 2)

    run(scenario)


def test_kip_360_epoch_bump_with_the_current_epoch_and_its_retry():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        assert await h.init(expected=(pid, epoch)) == (OK, pid, epoch + 1)
        # the same request again (its answer lost): the bumped epoch, not another bump
        assert await h.init(expected=(pid, epoch)) == (OK, pid, epoch + 1)
        assert await h.init(expected=(pid, epoch - 1)) == (ErrorCode.producer_fenced, -1, -1)
        assert await h.init(expected=(pid + 7, epoch + 1)) == (ErrorCode.producer_fenced, -1, -1)

    run(scenario)


def test_an_exhausted_epoch_rotates_the_producer_id():
    async def scenario(h: TxnHarness):
        h.topic.create()
        old = TransactionMetadata("t", 77, 32766, 60_000, TransactionStatus.EMPTY, frozenset(), -1, 1)
        h.writer.records.append((encode_transaction_key("t"), encode_transaction_value(old.to_value())))
        h.writer.commit()
        await h.start()
        code, pid, epoch = await h.init()
        assert (code, epoch) == (OK, 0) and pid not in (77, -1)

    run(scenario)


def test_a_transition_in_flight_answers_concurrent_transactions():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        h.writer.auto_commit = False
        first = asyncio.ensure_future(h.add("t", pid, epoch, ("orders", 0)))
        await h.settle()
        second = asyncio.ensure_future(h.add("t", pid, epoch, ("orders", 1)))  # decided on the write in flight
        await h.settle()
        assert not first.done() and not second.done()  # an answer waits for the writes before it
        h.writer.commit()
        assert (await first, await second) == (OK, ErrorCode.concurrent_transactions)

    run(scenario)


def test_a_failed_write_answers_the_coordinator_error_and_leaves_no_state():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        h.writer.fail_appends = 1
        # the append raised (a storage error): NOT_COORDINATOR, as Kafka maps it
        assert await h.add("t", pid, epoch, ("orders", 0)) == ErrorCode.not_coordinator
        assert h.state() == "Empty"
        assert await h.add("t", pid, epoch, ("orders", 0)) == OK

    run(scenario)


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init(timeout_ms=1_000)
        await h.add("t", pid, epoch, ("orders", 0))
        h.clock.advance(10_000)  # transaction.abort.timed.out.transaction.cleanup.interval.ms
        await h.settle()
        assert h.state() == "CompleteAbort"
        assert h.leaders.marked() == [(1, pid, epoch + 1, False, 0, [("orders", 0)])]
        assert await h.end("t", pid, epoch, True) == ErrorCode.producer_fenced

    run(scenario)


def test_a_transaction_within_its_timeout_is_left_alone():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init(timeout_ms=60_000)
        await h.add("t", pid, epoch, ("orders", 0))
        h.clock.advance(10_000)
        await h.settle()
        assert h.state() == "Ongoing"

    run(scenario)


def test_idle_transactional_ids_expire_with_a_tombstone():
    async def scenario(h: TxnHarness):
        await h.start()
        await h.init("idle")
        h.clock.advance(3_600_000)
        await h.settle()
        assert h.records()[-1] == ("idle", None)
        assert (await h.describe("idle"))["error_code"] == ErrorCode.transactional_id_not_found

    run(scenario, transactional_id_expiration_ms="1000")


def test_marker_retries_follow_the_new_leader_and_fenced_answers_stop_them():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        await h.add("t", pid, epoch, ("orders", 0), ("orders", 1))
        h.leaders.answers[("orders", 1)] = [ErrorCode.not_leader_or_follower]
        await h.end("t", pid, epoch, True)
        await h.settle()
        assert h.state() == "PrepareCommit"
        described = await h.describe()
        assert described["topics"] == [{"topic": "orders", "partitions": [1]}]  # only the unmarked one
        h.leaders.leaders[("orders", 1)] = 2  # the leader moved
        h.clock.advance(100)
        await h.settle()
        assert h.leaders.marked()[-1][0] == 2 and h.state() == "CompleteCommit"

        await h.add("t", pid, epoch, ("orders", 0))
        h.leaders.answers[("orders", 0)] = [ErrorCode.invalid_producer_epoch]
        await h.end("t", pid, epoch, True)
        await h.settle()
        h.clock.advance(1000)
        await h.settle()
        assert h.state() == "PrepareCommit"  # a newer producer owns the partition: nothing more sent
        assert not h.coordinator.markers.pending

    run(scenario)


def test_a_deleted_partition_needs_no_marker_and_an_unreachable_leader_is_retried():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init()
        await h.add("t", pid, epoch, ("gone", 0), ("orders", 0))
        h.leaders.deleted.add(("gone", 0))
        h.leaders.unreachable.add(1)
        await h.end("t", pid, epoch, False)
        await h.settle()
        assert h.state() == "PrepareAbort"
        h.leaders.unreachable.clear()
        h.clock.advance(100)
        await h.settle()
        assert h.state() == "CompleteAbort"
        assert all(partitions == [("orders", 0)] for *_, partitions in h.leaders.marked())

    run(scenario)


def test_a_new_coordinator_loads_the_log_and_finishes_prepared_transactions():
    async def scenario():
        clock = ManualClock()
        topic = InMemoryOffsetsTopic(1, set())
        first = TxnHarness(topic=topic, clock=clock)
        await first.start()
        _, pid, epoch = await first.init()
        await first.add("t", pid, epoch, ("orders", 0))
        first.leaders.unreachable.add(1)  # the markers never land: the coordinator dies first
        await first.end("t", pid, epoch, True)
        await first.settle()
        assert first.state() == "PrepareCommit"
        await first.coordinator.stop()

        second = TxnHarness(topic=topic, clock=clock)
        second.coordinator.start()
        await second.settle()
        assert second.state() == "CompleteCommit"
        assert second.leaders.marked() == [(1, pid, epoch, True, 0, [("orders", 0)])]
        # the producer goes on with its id; the in-memory last epoch is gone, as in Kafka
        assert await second.init() == (OK, pid, epoch + 1)
        await second.coordinator.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def test_a_standby_replays_but_sends_nothing_until_promoted():
    async def scenario():
        clock = ManualClock()
        topic = InMemoryOffsetsTopic(1, set())
        topic.create()
        leader = TxnHarness(topic=topic, clock=clock, settings={"zookeeper.connect": "zk:1"})
        standby = TxnHarness(topic=topic, clock=clock, settings={"zookeeper.connect": "zk:1"})
        leader.coordinator.partition_led("__transaction_state", 0, 1)
        standby.coordinator.partition_followed("__transaction_state", 0, 1)
        await leader.settle()
        _, pid, epoch = await leader.init()
        await leader.add("t", pid, epoch, ("orders", 0))
        leader.leaders.unreachable.add(1)
        await leader.end("t", pid, epoch, False)
        await leader.settle()
        await standby.settle()
        assert standby.state() == "PrepareAbort" and standby.leaders.requests == []
        assert (await standby.init())[0] == ErrorCode.not_coordinator
        leader.coordinator.partition_followed("__transaction_state", 0, 2)
        standby.coordinator.partition_led("__transaction_state", 0, 2)
        await standby.settle()
        assert standby.state() == "CompleteAbort"
        assert standby.leaders.marked() == [(1, pid, epoch, False, 2, [("orders", 0)])]  # the new epoch
        await leader.coordinator.stop()
        await standby.coordinator.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def test_verification_and_listing_read_the_committed_state():
    async def scenario(h: TxnHarness):
        await h.start()
        _, pid, epoch = await h.init("a")
        await h.add("a", pid, epoch, ("orders", 0))
        _, other, _ = await h.init("b")
        shard = h.coordinator.shards[0].shard
        assert shard.verify_partitions("a", pid, epoch, [("orders", 0), ("orders", 1)]) == {
            ("orders", 0): OK, ("orders", 1): ErrorCode.transaction_abortable}
        assert shard.verify_partitions("a", pid, epoch + 1, [("orders", 0)]) == {
            ("orders", 0): ErrorCode.producer_fenced}
        listed, code = h.coordinator.list_transactions(frozenset(), frozenset(), -1, None)
        assert code == OK and [(t["transactional_id"], t["transaction_state"]) for t in listed] == \
            [("a", "Ongoing"), ("b", "Empty")]
        ongoing, _ = h.coordinator.list_transactions(frozenset({TransactionStatus.ONGOING}), frozenset(), -1, None)
        assert [t["transactional_id"] for t in ongoing] == ["a"]
        by_pid, _ = h.coordinator.list_transactions(frozenset(), frozenset({other}), -1, None)
        assert [t["transactional_id"] for t in by_pid] == ["b"]
        h.clock.advance(5)
        long_running, _ = h.coordinator.list_transactions(frozenset(), frozenset(), 1, None)
        assert [t["transactional_id"] for t in long_running] == ["a"]
        described = await h.describe("a")
        assert (described["transaction_state"], described["topics"]) == \
            ("Ongoing", [{"topic": "orders", "partitions": [0]}])
        assert (await h.describe("nobody"))["error_code"] == ErrorCode.transactional_id_not_found

    run(scenario)


def test_markers_in_flight_survive_a_leader_epoch_bump_of_the_same_leadership():
    """The controller bumps the leader epoch at every ISR change it makes; the shard serves on,
    and so must the markers it prepared (they are not sent again by anyone else)."""
    async def scenario(h: TxnHarness):
        h.topic.create()
        h.coordinator.partition_led("__transaction_state", 0, 1)
        await h.settle()
        _, pid, epoch = await h.init()
        await h.add("t", pid, epoch, ("orders", 0))
        h.leaders.unreachable.add(1)
        await h.end("t", pid, epoch, True)
        await h.settle()
        h.coordinator.partition_leader_epoch("__transaction_state", 0, 2)
        h.leaders.unreachable.clear()
        h.clock.advance(100)
        await h.settle()
        assert h.state() == "CompleteCommit"

    run(scenario, zookeeper_connect="zk:1")


def test_markers_of_several_transactions_for_one_leader_go_in_one_request():
    async def scenario(h: TxnHarness):
        await h.start()
        h.leaders.unreachable.add(1)
        producers = {}
        for txn in ("a", "b"):
            _, pid, epoch = await h.init(txn)
            await h.add(txn, pid, epoch, ("orders", 0))
            await h.end(txn, pid, epoch, txn == "a")
            producers[txn] = pid
        await h.settle()
        h.leaders.requests.clear()
        h.leaders.unreachable.clear()
        h.clock.advance(100)
        await h.settle()
        (broker, request), = h.leaders.requests
        assert sorted((m["producer_id"], m["transaction_result"]) for m in request["markers"]) == \
            sorted([(producers["a"], True), (producers["b"], False)])
        assert (h.state("a"), h.state("b")) == ("CompleteCommit", "CompleteAbort")

    run(scenario)
