"""The transaction coordinator on a three-broker cluster: `__transaction_state` created on first
use with three replicas and min.insync.replicas=2; a transactional id's coordinator SIGKILLed in
the middle of a transaction; the broker that takes its partition over has the transaction (the
state failed over through the replicated log), and a new producer's InitProducerId there aborts
it at a bumped epoch, which fences the old producer.

(Whether the markers complete is up to the partition leaders' WriteTxnMarkers handler: the
abort is checked as prepared or completed.)"""

from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tests.zk.offsets_cluster import WAIT_S, bootstrap, make_brokers, until
from tidemark.coordinator.partitioner import partition_for

TXN_TOPIC = "__transaction_state"
TXN_PARTITIONS = 3
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, DESCRIBE_TRANSACTIONS = 10, 22, 24, 26, 65


def _coordinator(brokers, txn: str, skip: int | None = None) -> int:
    """The id's coordinator as a live broker names it (not `skip`, the one killed)."""
    def ask():
        for number, broker in brokers.items():
            if number == skip:
                continue
            with RawClient(broker.bootstrap) as client:
                found = client.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn]})
            (entry,) = found.coordinators
            if entry.error_code == ErrorCode.none and entry.node_id != skip:
                return entry.node_id
        return None
    return until(ask, "a transaction coordinator")


def _request(broker, api_key: int, version: int, body: dict, retry=(ErrorCode.coordinator_load_in_progress,
                                                                   ErrorCode.not_coordinator)):
    def ask():
        with RawClient(broker.bootstrap) as client:
            response = client.request(api_key, version, body)
        if api_key == DESCRIBE_TRANSACTIONS:
            code = response.transaction_states[0].error_code
        elif api_key == ADD_PARTITIONS:
            code = response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        else:
            code = response.error_code
        return None if code in retry else response
    return until(ask, f"an answer to api {api_key}")


def test_transaction_state_fails_over_and_the_new_coordinator_fences_the_old_producer(make_broker, chroot, zk):
    brokers = make_brokers(make_broker, chroot, **{"transaction.state.log.num.partitions": str(TXN_PARTITIONS)})
    for broker in brokers.values():
        broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers), "log_level": 0})
    admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(WAIT_S)

    first = _coordinator(brokers, "app")
    root = "/" + chroot.split("/", 1)[1]
    config = json.loads(zk.get(f"{root}/config/topics/{TXN_TOPIC}")[0])["config"]
    assert (config["cleanup.policy"], config["min.insync.replicas"]) == ("compact", "2")
    assigned = json.loads(zk.get(f"{root}/brokers/topics/{TXN_TOPIC}")[0])["partitions"]
    assert len(assigned) == TXN_PARTITIONS and all(len(r) == 3 for r in assigned.values())
    state_path = f"{root}/brokers/topics/{TXN_TOPIC}/partitions/{partition_for('app', TXN_PARTITIONS)}/state"
    until(lambda: len(json.loads(zk.get(state_path)[0])["isr"]) == 3, "three in-sync replicas")

    init = {"transactional_id": "app", "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    started = _request(brokers[first], INIT_PRODUCER_ID, 4, init)
    assert (started.error_code, started.producer_epoch) == (ErrorCode.none, 0)
    pid = started.producer_id
    added = _request(brokers[first], ADD_PARTITIONS, 3, {
        "v3_and_below_transactional_id": "app", "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "orders", "partitions": [0]}]}, retry=())
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none

    brokers[first].kill()
    second = _coordinator(brokers, "app", skip=first)
    described = _request(brokers[second], DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["app"]})
    state = described.transaction_states[0]
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == ("Ongoing", pid, 0)
    assert [(t.topic, list(t.partitions)) for t in state.topics] == [("orders", [0])]

    # a new producer: the ongoing transaction is aborted first, at epoch 1, never handed out
    fencing = _request(brokers[second], INIT_PRODUCER_ID, 4, init, retry=())
    assert fencing.error_code == ErrorCode.concurrent_transactions
    aborted = _request(brokers[second], DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["app"]})
    state = aborted.transaction_states[0]
    assert state.transaction_state in ("PrepareAbort", "CompleteAbort") and state.producer_epoch == 1
    old = _request(brokers[second], END_TXN, 3, {"transactional_id": "app", "producer_id": pid, "producer_epoch": 0,
                                                 "committed": True}, retry=())
    assert old.error_code == ErrorCode.producer_fenced
