"""ACLs enforced over the wire, as Kafka's AclAuthorizer enforces them: real clients (confluent-kafka)
as User:ANONYMOUS against a broker with the authorizer on. ACLs are created through the admin
API while User:ANONYMOUS is a super user; the broker then restarts without super.users, so the
ACLs it enforces come from its data directory. Allowed operations work; each refused operation
gets Kafka's error, and the offsets log is byte-for-byte unchanged afterwards."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from confluent_kafka import ConsumerGroupTopicPartitions

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic, produce_all
from tests.integration.raw import RawClient
from tidemark.wire.api_keys import ApiKey

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
ANON = "User:ANONYMOUS"
BOUND_S = 60.0  # a hang guard, never a margin

ACLS = [
    AclBinding(ResourceType.TOPIC, "open-", ResourcePatternType.PREFIXED, ANON, "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "open-", ResourcePatternType.PREFIXED, ANON, "*", AclOperation.WRITE,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "open-denied", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.WRITE,
               AclPermissionType.DENY),
    AclBinding(ResourceType.TOPIC, "secret", ResourcePatternType.LITERAL, ANON, "*", AclOperation.DESCRIBE,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, "readers", ResourcePatternType.LITERAL, ANON, "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, "watchers", ResourcePatternType.LITERAL, ANON, "*", AclOperation.DESCRIBE,
               AclPermissionType.ALLOW),
]


def _offsets_log(data_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.glob("__consumer_offsets-*/*.log"))}


def _code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


def _partition_code(future, _index: int) -> int:
    """The error an admin result reports, whether for the whole request or its one partition."""
    try:
        result = future.result(timeout=BOUND_S)
    except KafkaException as exc:
        return _code(exc)
    (tp,) = result.topic_partitions
    assert tp.error is not None, tp
    return tp.error.code()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("acls") / "data"
    setup = BrokerProcess(data_dir, {**AUTHORIZER, "super.users": ANON}).start()
    try:
        bootstrap = setup.bootstrap
        for topic in ("open-a", "open-denied", "secret", "hidden"):
            create_topic(bootstrap, topic, 1)
        for topic in ("open-a", "secret"):
            produce_all(bootstrap, topic, [(0, None, f"{topic}-{i}".encode()) for i in range(5)])
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for group, offset in (("readers", 3), ("watchers", 2), ("hidden-g", 1)):
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition("open-a", 0, offset)])])[group].result(timeout=BOUND_S)
        for future in admin.create_acls(ACLS, request_timeout=15).values():
            future.result(timeout=BOUND_S)
        setup.stop()
        broker = BrokerProcess(data_dir, AUTHORIZER, port=setup.port).start()  # no super user now
    finally:
        setup.kill()
    yield broker
    broker.kill()


def test_acls_survive_the_restart_and_are_described(secured):
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    # DescribeAcls needs DESCRIBE on the cluster, which User:ANONYMOUS no longer has (asked raw:
    # confluent-kafka's describe_acls reports a refused DescribeAcls as an empty list).
    with RawClient(secured.bootstrap) as raw:
        answer = raw.request(ApiKey.DESCRIBE_ACLS, 2, {"resource_type_filter": 1, "resource_name_filter": None,
                                     "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                     "operation": 1, "permission_type": 1})
    assert answer.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED and answer.resources == ()
    futures = admin.create_acls([ACLS[0]], request_timeout=15)
    with pytest.raises(KafkaException) as refused:
        next(iter(futures.values())).result(timeout=BOUND_S)
    assert _code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The restarted broker loaded them from its data directory: Metadata shows what it may describe.
    topics = set(admin.list_topics(timeout=BOUND_S).topics)
    assert topics == {"open-a", "open-denied", "secret"}


def test_allowed_and_refused_operations(secured):
    bootstrap = secured.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # -- allowed: produce, consume in a group from its committed offset, commit, describe, list
    produce_all(bootstrap, "open-a", [(0, None, b"open-a-5")])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["open-a"])
    values = []
    deadline = time.monotonic() + BOUND_S
    while len(values) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    assert values == [b"open-a-3", b"open-a-4", b"open-a-5"]
    consumer.commit(offsets=[TopicPartition("open-a", 0, 6)], asynchronous=False)
    assert consumer.committed([TopicPartition("open-a", 0)], timeout=BOUND_S)[0].offset == 6
    consumer.close()
    described = admin.describe_consumer_groups(["watchers"], request_timeout=15)["watchers"].result(timeout=BOUND_S)
    assert described.group_id == "watchers"
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=BOUND_S)
    assert {g.group_id for g in listed.valid} == {"readers", "watchers"}  # not hidden-g

    before = _offsets_log(secured.data_dir)
    assert before

    # -- refused: each gets Kafka's code, and nothing is written
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "watchers", "enable.auto.commit": False})
    with pytest.raises(KafkaException) as commit:  # commit: READ on the group needed
        watcher.commit(offsets=[TopicPartition("open-a", 0, 4)], asynchronous=False)
    assert _code(commit.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    watcher.close()

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    try:  # commit on a topic the group may read but the principal may not
        answered = reader.commit(offsets=[TopicPartition("secret", 0, 4)], asynchronous=False)
        codes = [tp.error.code() for tp in answered]
    except KafkaException as exc:
        codes = [_code(exc)]
    assert codes == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # fetch offsets of a topic the principal may not describe
    fetched = reader.committed([TopicPartition("hidden", 0)], timeout=BOUND_S)
    assert fetched[0].error is not None and fetched[0].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    reader.close()

    with pytest.raises(KafkaException) as fetch_offsets:  # fetch offsets: DESCRIBE on the group
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("nobody", [TopicPartition("open-a", 0)])],
                                          request_timeout=15)["nobody"].result(timeout=BOUND_S)
    assert _code(fetch_offsets.value) == KafkaError.GROUP_AUTHORIZATION_FAILED

    with pytest.raises(KafkaException) as describe:  # describe: DESCRIBE on the group
        admin.describe_consumer_groups(["nobody"], request_timeout=15)["nobody"].result(timeout=BOUND_S)
    assert _code(describe.value) == KafkaError.GROUP_AUTHORIZATION_FAILED

    # reset: OffsetCommit, READ on the group (the admin client reports it per partition)
    reset = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "watchers", [TopicPartition("open-a", 0, 0)])])["watchers"]
    assert [_partition_code(reset, tp) for tp in [0]] == [KafkaError.GROUP_AUTHORIZATION_FAILED]

    with pytest.raises(KafkaException) as delete:  # delete: DELETE on the group
        admin.delete_consumer_groups(["readers"], request_timeout=15)["readers"].result(timeout=BOUND_S)
    assert _code(delete.value) == KafkaError.GROUP_AUTHORIZATION_FAILED

    with RawClient(bootstrap) as raw:  # delete offsets (OffsetDelete v0): DELETE on the group
        answer = raw.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "readers", "topics": [
            {"name": "open-a", "partitions": [{"partition_index": 0}]}]})
    assert answer.error_code == KafkaError.GROUP_AUTHORIZATION_FAILED

    for topic in ("secret", "open-denied"):  # produce: WRITE on the topic (a deny wins over the prefix)
        errors = []
        producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0})
        producer.produce(topic, b"x", partition=0, on_delivery=lambda err, _msg: errors.append(err))
        assert producer.flush(BOUND_S) == 0
        assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], topic

    fetcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    fetcher.assign([TopicPartition("secret", 0, 0)])  # fetch: READ on the topic
    error = None
    deadline = time.monotonic() + BOUND_S
    while error is None and time.monotonic() < deadline:
        msg = fetcher.poll(0.5)
        if msg is not None:
            assert msg.error() is not None, msg.value()
            error = msg.error()
    fetcher.close()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert _offsets_log(secured.data_dir) == before
    # And what the group had committed is still what it reads.
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    assert check.committed([TopicPartition("open-a", 0)], timeout=BOUND_S)[0].offset == 6
    check.close()


# -- principals other than User:ANONYMOUS, in-process: the test sets each connection's principal,
# as SASL or TLS will -----------------------------------------------------------------------------

def _binding(rtype, name: str, principal: str, op, pattern=None):
    from tidemark.broker.security.authorizer import (AccessControlEntry, AclBinding, PatternType, PermissionType,
                                                     ResourcePattern)
    return AclBinding(ResourcePattern(rtype, name, pattern or PatternType.LITERAL),
                      AccessControlEntry(principal, "*", op, PermissionType.ALLOW))


def _commit_body(group: str, topics: list[str]) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t in topics]}


def test_each_principal_gets_what_its_acls_allow(tmp_path):
    import asyncio

    from tests.broker.inprocess import running_broker
    from tests.integration.raw import AsyncRawClient, fetch_body
    from tidemark.broker.acl_operations import AclOperation as Op
    from tidemark.broker.security.authorizer import ResourceType as R

    async def scenario() -> None:
        settings = {**AUTHORIZER, "super.users": "User:admin"}
        async with running_broker(tmp_path / "data", settings) as broker:
            opened = broker.connection_context
            principals: list[str] = []

            def context_as(host: str, *args: object):  # the next connection is that principal's
                ctx = opened(host, *args)
                ctx.principal = principals.pop(0)
                return ctx

            broker.connection_context = context_as

            async def connect(principal: str) -> AsyncRawClient:
                principals.append(principal)
                return await AsyncRawClient.connect(broker.port)

            admin, alice, bob = [await connect(p) for p in ("User:admin", "User:alice", "User:bob")]
            await broker.acl_store.create([_binding(R.TOPIC, "orders", "User:alice", Op.READ),
                                           _binding(R.GROUP, "app", "User:alice", Op.READ)])
            for topic in ("orders", "secret"):
                created = await admin.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1,
                    "replication_factor": 1, "assignments": [], "configs": []}], "timeout": 10000,
                    "validate_only": False})
                assert created.topics[0].error_code == 0
            refused = await bob.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": "mine", "num_partitions": 1,
                "replication_factor": 1, "assignments": [], "configs": []}], "timeout": 10000, "validate_only": False})
            assert refused.topics[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
            # The offsets topic is created at the first FindCoordinator; commit once it has loaded.
            await admin.request(ApiKey.FIND_COORDINATOR, 3, {"key": "app", "key_type": 0})
            while (code := (await admin.request(ApiKey.OFFSET_COMMIT, 8, _commit_body("app", ["secret"]))).topics[0].partitions[0]
                   .error_code) == KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
                await asyncio.sleep(0.01)  # loading an empty partition: the next try finds it loaded
            assert code == 0

            # OffsetCommit: READ on the group, then per topic.
            committed = await alice.request(ApiKey.OFFSET_COMMIT, 8, _commit_body("app", ["orders", "secret"]))
            assert [(t.name, t.partitions[0].error_code) for t in committed.topics] == [
                ("orders", 0), ("secret", KafkaError.TOPIC_AUTHORIZATION_FAILED)]
            bobs = await bob.request(ApiKey.OFFSET_COMMIT, 8, _commit_body("app", ["orders"]))
            assert bobs.topics[0].partitions[0].error_code == KafkaError.GROUP_AUTHORIZATION_FAILED

            # OffsetFetch: per group; all topics: only those it may describe; named: refused per partition.
            fetched = await alice.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "app", "topics": None},
                                                            {"group_id": "other", "topics": None}],
                                                 "require_stable": False})
            assert [(g.group_id, g.error_code, [t.name for t in g.topics]) for g in fetched.groups] == [
                ("app", 0, ["orders"]), ("other", KafkaError.GROUP_AUTHORIZATION_FAILED, [])]
            named = await alice.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "app", "topics": [
                {"name": "secret", "partition_indexes": [0]}]}], "require_stable": False})
            assert named.groups[0].topics[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
            assert named.groups[0].topics[0].partitions[0].committed_offset == -1

            # Metadata: topics filtered by DESCRIBE; KIP-430's operations as the authorizer decides.
            meta = await alice.request(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                              "include_cluster_authorized_operations": True,
                                              "include_topic_authorized_operations": True})
            assert [(t.name, t.topic_authorized_operations) for t in meta.topics] == [
                ("orders", (1 << Op.READ) | (1 << Op.DESCRIBE))]
            assert meta.cluster_authorized_operations == 0
            assert [t.name for t in (await bob.request(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False})).topics] == []

            # Fetch: READ for a consumer; a follower's fetch needs CLUSTER_ACTION.
            consumer = await alice.request(ApiKey.FETCH, 11, fetch_body([("orders", 0, 0, 1024), ("secret", 0, 0, 1024)]))
            assert [p.error_code for t in consumer.responses for p in t.partitions] == [
                0, KafkaError.TOPIC_AUTHORIZATION_FAILED]
            follower = await alice.request(ApiKey.FETCH, 11, {**fetch_body([("orders", 0, 0, 1024)]), "replica_id": 1})
            assert follower.responses[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED

            # The group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup need READ on the group.
            join = {"group_id": "app", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                    "group_instance_id": None, "protocol_type": "consumer", "protocols": [
                        {"name": "range", "metadata": b""}], "reason": None}
            assert (await bob.request(ApiKey.JOIN_GROUP, 9, join)).error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            assert (await bob.request(ApiKey.SYNC_GROUP, 5, {"group_id": "app", "generation_id": 1, "member_id": "m",
                                              "group_instance_id": None, "protocol_type": None,
                                              "protocol_name": None, "assignments": []})
                    ).error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            assert (await bob.request(ApiKey.HEARTBEAT, 4, {"group_id": "app", "generation_id": 1, "member_id": "m",
                                              "group_instance_id": None})
                    ).error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            assert (await bob.request(ApiKey.LEAVE_GROUP, 5, {"group_id": "app", "members": [
                {"member_id": "m", "group_instance_id": None, "reason": None}]})
                    ).error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            # DescribeGroups: DESCRIBE, with the group's operations as the authorizer decides;
            # ListGroups: the groups the principal may describe; DeleteGroups: DELETE.
            described = await alice.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["app", "other"], "include_authorized_operations": True})
            assert [(g.group_id, g.error_code) for g in described.groups] == [
                ("app", 0), ("other", KafkaError.GROUP_AUTHORIZATION_FAILED)]
            assert described.groups[0].authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
            assert [g.group_id for g in (await alice.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})).groups] == ["app"]
            assert [g.group_id for g in (await bob.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})).groups] == []
            deleted = await alice.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["app"]})
            assert deleted.results[0].error_code == KafkaError.GROUP_AUTHORIZATION_FAILED

            # KIP-848's heartbeat: READ on the group, DESCRIBE on each topic subscribed to.
            heartbeat = {"group_id": "app", "member_id": "m-1", "member_epoch": 0, "instance_id": None,
                         "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": ["secret"],
                         "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
            assert (await bob.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)).error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            assert (await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)).error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED

            # Transactions: WriteTxnMarkers is for brokers (CLUSTER_ACTION); TxnOffsetCommit needs WRITE
            # on the transactional id first.
            markers = await bob.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{"producer_id": 1, "producer_epoch": 0,
                "transaction_result": True, "topics": [{"name": "orders", "partition_indexes": [0]}],
                "coordinator_epoch": 0}]})
            assert markers.markers[0].topics[0].partitions[0].error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
            txn_commit = await alice.request(ApiKey.TXN_OFFSET_COMMIT, 3, {"transactional_id": "tx", "group_id": "app", "producer_id": 1,
                "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                    {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
            assert txn_commit.topics[0].partitions[0].error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            # The transaction coordinator's APIs: WRITE on the transactional id (AddPartitionsToTxn
            # also WRITE on each topic, AddOffsetsToTxn READ on the group), DESCRIBE to see one.
            await broker.acl_store.create([_binding(R.TRANSACTIONAL_ID, "tx", "User:alice", Op.WRITE)])
            added = await bob.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1,
                "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": "orders", "partitions": [0]}]})
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            added = await alice.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1,
                "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": "orders", "partitions": [0]}]})
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
                KafkaError.TOPIC_AUTHORIZATION_FAILED  # alice may read orders, not write it
            offsets_added = await alice.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                                                        "group_id": "other"})
            assert offsets_added.error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            ended = await bob.request(ApiKey.END_TXN, 3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                                              "committed": True})
            assert ended.error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            described = await bob.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
            assert described.transaction_states[0].error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            listed = await bob.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
            assert listed.error_code == 0 and listed.transaction_states == ()

            # ApiVersions is never authorized.
            assert (await bob.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                              "client_software_version": "1"})).error_code == 0
            for client in (admin, alice, bob):
                await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=BOUND_S))


def test_txn_offset_commit_and_regex_heartbeat_skip_only_what_the_principal_may_not_see(tmp_path):
    """TxnOffsetCommit commits the topics the principal may read and answers
    TOPIC_AUTHORIZATION_FAILED for the others; a KIP-848 regex subscription is assigned only the
    matching topics the member's principal may DESCRIBE (as Kafka's regex resolution filters)."""
    import asyncio

    from tests.broker.inprocess import running_broker
    from tests.integration.raw import AsyncRawClient
    from tidemark.broker.acl_operations import AclOperation as Op
    from tidemark.broker.security.authorizer import ResourceType as R

    async def scenario() -> None:
        async with running_broker(tmp_path / "data", {**AUTHORIZER, "super.users": "User:admin"}) as broker:
            opened = broker.connection_context
            principals: list[str] = []

            def context_as(host: str, *args: object):
                ctx = opened(host, *args)
                ctx.principal = principals.pop(0)
                return ctx

            broker.connection_context = context_as

            async def connect(principal: str) -> AsyncRawClient:
                principals.append(principal)
                return await AsyncRawClient.connect(broker.port)

            admin, alice = await connect("User:admin"), await connect("User:alice")
            await broker.acl_store.create([_binding(R.TOPIC, "orders", "User:alice", Op.READ),
                                           _binding(R.GROUP, "app", "User:alice", Op.READ),
                                           _binding(R.TRANSACTIONAL_ID, "tx", "User:alice", Op.WRITE)])
            for topic in ("orders", "orders-secret"):
                created = await admin.request(19, 7, {"topics": [{"name": topic, "num_partitions": 2,
                    "replication_factor": 1, "assignments": [], "configs": []}], "timeout": 10000,
                    "validate_only": False})
                assert created.topics[0].error_code == 0
            await admin.request(10, 3, {"key": "app", "key_type": 0})  # creates the offsets topic
            while (code := (await admin.request(8, 8, _commit_body("app", ["orders"]))).topics[0].partitions[0]
                   .error_code) == KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
                await asyncio.sleep(0.01)  # loading an empty partition: the next try finds it loaded
            assert code == 0

            def txn_topic(name: str) -> dict:
                return {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}]}

            txn_commit = await alice.request(28, 3, {"transactional_id": "tx", "group_id": "app", "producer_id": 5,
                "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [txn_topic("orders-secret"), txn_topic("orders")]})
            assert [(t.name, [p.error_code for p in t.partitions]) for t in txn_commit.topics] == [
                ("orders-secret", [KafkaError.TOPIC_AUTHORIZATION_FAILED]), ("orders", [0])]
            # The readable topic's offset is pending in the transaction: a stable fetch says so.
            stable = await alice.request(9, 8, {"groups": [{"group_id": "app", "topics": [
                {"name": "orders", "partition_indexes": [0]}]}], "require_stable": True})
            assert stable.groups[0].topics[0].partitions[0].error_code == KafkaError.UNSTABLE_OFFSET_COMMIT

            meta = await admin.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
            ids = {t.name: t.topic_id for t in meta.topics}
            joined = await alice.request(68, 1, {"group_id": "app", "member_id": "m-1", "member_epoch": 0,
                "instance_id": None, "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": None,
                "subscribed_topic_regex": "orders.*", "server_assignor": None, "topic_partitions": []})
            assert joined.error_code == 0, joined.error_message
            assert [(t.topic_id, sorted(t.partitions)) for t in joined.assignment.topic_partitions] == [
                (ids["orders"], [0, 1])]
            for client in (admin, alice):
                await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=BOUND_S))
