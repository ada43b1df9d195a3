"""The offsets-log jobs: the snapshot equals OffsetFetch for every group (over the wire and from
the segment files, on a log with overwrites, deleted offsets, a deleted group, expired offsets
and compaction gaps), the lag report, and the expiry report against the coordinator's own rules."""

from __future__ import annotations

import datetime
import struct
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic, produce_all
from tests.integration.raw import RawClient
from tidemark.cli.groups import groups as groups_cli
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.log.direct_read import iter_log_records, topic_partition_dirs
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from tidemark.spark.jobs import expiry_report, lag_report, offsets_snapshot
from tidemark.spark.jobs.common import read_offsets_log
from tidemark.wire.api_keys import ApiKey

SETTINGS = {
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "100",
    "offsets.retention.check.interval.ms": "300",
    "offsets.topic.segment.bytes": "8192",  # rolls often, so the cleaner has closed segments
    "log.cleaner.backoff.ms": "200",
}
ORDERS = {0: 10, 1: 12, 2: 14}  # partition -> messages produced
PAYMENTS = {0: 5, 1: 6}
SOLO_FINAL = {0: 3, 1: 7, 2: 10}
ROUNDS = 120
WAIT_S = 30


def _commit(client: RawClient, group: str, topic: str, offsets: dict[int, int], *, version: int = 8,
            retention_ms: int = -1, metadata: str | None = None) -> None:
    """OffsetCommit as a standalone consumer would send it, retried while the offsets topic loads."""
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time": retention_ms,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": 4,
                 "committed_metadata": metadata} for p, o in offsets.items()]}]}
    deadline = time.monotonic() + WAIT_S
    while True:
        response = client.request(ApiKey.OFFSET_COMMIT, version, body)
        codes = {p.error_code for t in response.topics for p in t.partitions}
        if codes == {ErrorCode.none}:
            return
        assert codes <= {ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                         ErrorCode.coordinator_not_available}, codes
        assert time.monotonic() < deadline, f"commit for {group} kept failing: {codes}"
        time.sleep(0.05)


def _offset_fetch(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str, int | None]]:
    """OffsetFetch (v7, all topics) of the group: offset, metadata, leader epoch per partition."""
    with RawClient(bootstrap) as client:
        deadline = time.monotonic() + WAIT_S
        while True:
            response = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "require_stable": False, "topics": None})
            if response.error_code == ErrorCode.none:
                break
            assert time.monotonic() < deadline, f"OffsetFetch for {group}: {response.error_code!r}"
            time.sleep(0.05)
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata,
                                          None if p.committed_leader_epoch < 0 else p.committed_leader_epoch)
            for t in response.topics for p in t.partitions if p.committed_offset >= 0}


def _has_gap(data_dir) -> bool:
    """Whether some offsets partition misses offsets below its last record (compacted away)."""
    for _, directory in topic_partition_dirs(data_dir, "__consumer_offsets"):
        offsets = [offset for offset, _, _, _ in iter_log_records(directory)]
        if offsets != list(range(len(offsets))):
            return True
    return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One broker, driven through every way an offset leaves or changes in the log."""
    broker = BrokerProcess(tmp_path_factory.mktemp("jobs") / "data", SETTINGS).start()
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "orders", 3)
        create_topic(bootstrap, "payments", 2)
        produce_all(bootstrap, "orders", [(p, None, b"o") for p, n in ORDERS.items() for _ in range(n)])
        produce_all(bootstrap, "payments", [(p, None, b"p") for p, n in PAYMENTS.items() for _ in range(n)])
        with RawClient(bootstrap) as client:
            # Overwrites: many rounds, the last one wins; enough records to roll segments.
            for i in range(ROUNDS):
                _commit(client, "solo", "orders", {p: i % 9 for p in ORDERS})
            _commit(client, "solo", "orders", SOLO_FINAL, metadata="done")
            # Offsets deleted (OffsetDelete) and a group deleted (DeleteGroups): tombstones.
            _commit(client, "pruned", "orders", {0: 1, 1: 2})
            _commit(client, "pruned", "payments", {0: 4, 1: 5})
            _commit(client, "gone", "orders", {0: 9})
            # Explicit retention (OffsetCommit v2): one that expires at once, one a day away.
            _commit(client, "expiring", "payments", {0: 1, 1: 1}, version=2, retention_ms=200)
            _commit(client, "kept-explicit", "payments", {1: 3}, version=2, retention_ms=86_400_000)
        result = CliRunner().invoke(groups_cli, ["delete-offsets", "pruned", "--topic", "payments",
                                                 "--bootstrap-server", bootstrap])
        assert result.exit_code == 0, result.output
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_consumer_groups(["gone"], request_timeout=15)["gone"].result(timeout=20)
        # A consumer group: joins, commits, leaves (group records: Stable with a member, then Empty).
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "live", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + WAIT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert consumer.assignment()
        consumer.commit(offsets=[TopicPartition("orders", p, p + 1) for p in ORDERS], asynchronous=False)
        consumer.close()
        # The broker's retention check tombstones "expiring"; the cleaner leaves gaps.
        deadline = time.monotonic() + WAIT_S
        while (_offset_fetch(bootstrap, "expiring") or not _has_gap(broker.data_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _offset_fetch(bootstrap, "expiring") == {}, "the explicit retention never expired"
        assert _has_gap(broker.data_dir), "the cleaner never compacted the offsets topic"
        yield broker
    finally:
        broker.kill()


EXPECTED_SNAPSHOT = {
    "solo": {("orders", p): (o, "done", 4) for p, o in SOLO_FINAL.items()},
    "pruned": {("orders", 0): (1, "", 4), ("orders", 1): (2, "", 4)},
    "kept-explicit": {("payments", 1): (3, "", None)},  # OffsetCommit v2 carries no leader epoch
    "live": {("orders", p): (p + 1, "", None) for p in ORDERS},
}
ALL_GROUPS = [*EXPECTED_SNAPSHOT, "gone", "expiring"]


def _by_group(snapshot) -> dict[str, dict[tuple[str, int], tuple[int, str, int | None]]]:
    result: dict[str, dict] = {}
    for row in snapshot.collect():
        epoch = None if row.leader_epoch < 0 else row.leader_epoch
        result.setdefault(row.group, {})[(row.topic, row.partition)] = (row.committed_offset, row.metadata, epoch)
    return result


@pytest.mark.parametrize("source", ["wire", "files"])
def test_snapshot_equals_offset_fetch_for_every_group(spark, cluster, source):
    broker = cluster
    if source == "wire":
        records = read_offsets_log(spark, bootstrap_servers=broker.bootstrap)
    else:
        records = read_offsets_log(spark, data_dir=str(broker.data_dir))
    records = records.cache()
    snapshot = _by_group(offsets_snapshot.offsets_snapshot(records))
    fetched = {group: _offset_fetch(broker.bootstrap, group) for group in ALL_GROUPS}
    assert snapshot == {group: offsets for group, offsets in fetched.items() if offsets}
    assert snapshot == EXPECTED_SNAPSHOT
    # The log did hold what the snapshot had to get past.
    commits = records.where("record_type = 'offset_commit'")
    assert commits.where("`group` = 'solo' AND NOT tombstone").count() > len(SOLO_FINAL)  # overwrites
    tombstoned = {(r.group, r.topic, r.partition) for r in commits.where("tombstone").collect()}
    assert tombstoned == {("pruned", "payments", 0), ("pruned", "payments", 1), ("gone", "orders", 0),
                          ("expiring", "payments", 0), ("expiring", "payments", 1)}
    assert records.where("record_type = 'unknown'").count() == 0
    explicit = commits.where("`group` = 'kept-explicit'").collect()
    assert [r.expire_timestamp - r.commit_timestamp for r in explicit] == [datetime.timedelta(days=1)]
    groups = {r.group: (r.state, r.protocol_type) for r in offsets_snapshot.group_snapshot(records).collect()}
    assert groups == {"live": ("Empty", "consumer")}
    records.unpersist()


def test_wire_and_files_give_the_same_rows(spark, cluster):
    broker = cluster
    from pyspark.testing import assertDataFrameEqual

    wire = read_offsets_log(spark, bootstrap_servers=broker.bootstrap)
    files = read_offsets_log(spark, data_dir=str(broker.data_dir))
    assertDataFrameEqual(wire, files)


def test_lag_report_from_the_cluster_and_from_files(spark, cluster, tmp_path):
    broker = cluster
    chart = tmp_path / "lag.png"
    now = int(time.time() * 1000)
    report, per_group = lag_report.main(spark, bootstrap_servers=broker.bootstrap, output=str(tmp_path / "lag"),
                                        fmt="csv", chart=str(chart), now_ms=now)
    rows = {(r.group, r.topic, r.partition): (r.committed_offset, r.log_end_offset, r.lag) for r in report.collect()}
    expected = {}
    for group, offsets in EXPECTED_SNAPSHOT.items():
        for (topic, partition), (committed, _, _) in offsets.items():
            end = (ORDERS if topic == "orders" else PAYMENTS)[partition]
            expected[(group, topic, partition)] = (committed, end, end - committed)
    assert rows == expected
    totals = {r.group: (r.partitions, r.total_lag) for r in per_group.collect()}
    assert totals == {group: (len(offsets), sum(v[2] for k, v in expected.items() if k[0] == group))
                      for group, offsets in EXPECTED_SNAPSHOT.items()}
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = spark.read.option("header", True).option("inferSchema", True).csv(str(tmp_path / "lag"))
    assert sorted(tuple(r)[:6] for r in written.collect()) == sorted((*k, *v) for k, v in expected.items())
    offline, _ = lag_report.main(spark, data_dir=str(broker.data_dir), now_ms=now)
    assert {(r.group, r.topic, r.partition): (r.committed_offset, r.log_end_offset, r.lag)
            for r in offline.collect()} == expected
    # Time lag and status: the same from the wire as from the files, for the same now.
    assert sorted(tuple(r) for r in offline.collect()) == sorted(tuple(r) for r in report.collect())
    assert all(r.status is not None and (r.lag_seconds or 0) >= 0 for r in report.collect())


# ---------------------------------------------------------------------------------------------
# Expiry: the report against GroupCoordinatorShard.expire_offsets over the same records

T = 1_700_000_000_000
MINUTE = 60_000
RETENTION = 10 * MINUTE


def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def _group(group: str, protocol_type: str, members: tuple[MemberMetadata, ...], became_at: int = -1,
           protocol: str | None = "range") -> tuple[bytes, bytes]:
    value = GroupMetadataValue(protocol_type, 2, protocol if members else None, members[0].member_id if members else None,
                               became_at, members)
    return encode_key(GroupMetadataKey(group)), encode_group_metadata_value(value)


def _offset(group: str, topic: str, partition: int, at: int, expire: int = -1) -> tuple[bytes, bytes]:
    return (encode_key(OffsetCommitKey(group, topic, partition)),
            encode_offset_commit_value(OffsetCommitValue(partition * 10, -1, "", at, expire)))


def _member(member_id: str, subscription: bytes) -> MemberMetadata:
    return MemberMetadata(member_id, None, "c", "/h", 30000, 10000, subscription, b"")


EXPIRY_RECORDS = [
    # Standalone consumer (no group record): from each commit.
    _offset("solo", "orders", 0, T), _offset("solo", "orders", 1, T + 5 * MINUTE),
    # A consumer group that became Empty at T + 20 min: from then, for every offset.
    _offset("emptied", "orders", 0, T), _offset("emptied", "payments", 0, T + MINUTE),
    _group("emptied", "consumer", (), became_at=T + 20 * MINUTE),
    # Empty without a state timestamp: from each commit.
    _offset("emptied-old", "orders", 0, T + 2 * MINUTE), _group("emptied-old", "consumer", ()),
    # Stable consumer group subscribed to orders: only its payments offset counts down.
    _offset("stable", "orders", 0, T), _offset("stable", "payments", 1, T + 3 * MINUTE),
    _group("stable", "consumer", (_member("m1", _subscription("orders")),)),
    # Stable group whose subscription does not decode, and a non-consumer group: kept.
    _offset("opaque", "payments", 0, T), _group("opaque", "consumer", (_member("m1", b"junk"),)),
    _offset("connect", "payments", 0, T), _group("connect", "connect", (_member("w1", b"\x00\x01"),)),
    # Explicit expire timestamps (value v1) decide where the offset may expire at all: a Stable
    # group keeps the topic it consumes, explicit retention or not.
    _offset("stable", "orders", 2, T, expire=T + 2 * MINUTE),
    _offset("solo", "orders", 2, T, expire=T + 60 * MINUTE),
    # An Empty consumer group without offsets left, and a tombstoned offset.
    _group("bare", "consumer", (), became_at=T),
    _offset("solo", "orders", 3, T), (encode_key(OffsetCommitKey("solo", "orders", 3)), None),
]


@pytest.fixture(scope="module")
def expiry_records(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("expiry")
    (root / "__consumer_offsets-0").mkdir()
    batch = build_batch([(key, value, (), T) for key, value in EXPIRY_RECORDS])
    (root / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(batch)
    return read_offsets_log(spark, data_dir=str(root)).cache()


def _coordinator_expires(at_ms: int) -> tuple[set[tuple[str, str, int]], set[str]]:
    """What the broker's retention check tombstones at at_ms, after loading EXPIRY_RECORDS."""
    shard = GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: True)
    for offset, (key, value) in enumerate(EXPIRY_RECORDS):
        shard.replay(offset, key, value, now_ms=T)
    offsets, groups = set(), set()
    for record in shard.expire_offsets(at_ms, RETENTION).records:
        key = decode_key(record.key)
        if isinstance(key, OffsetCommitKey):
            offsets.add((key.group, key.topic, key.partition))
        else:
            groups.add(key.group)
    return offsets, groups


@pytest.mark.parametrize("minutes", [0, 9, 10, 12, 14, 20, 29, 30, 31, 60, 61])
def test_expiry_report_matches_the_coordinator(expiry_records, minutes):
    at = T + minutes * MINUTE
    report = expiry_report.expiry_report(expiry_records, at, RETENTION).cache()
    expiring = {(r.group, r.topic, r.partition) for r in report.where("expires").collect()}
    summary = expiry_report.expiry_summary(expiry_records, report)
    assert (expiring, set(expiry_report.groups_removed(summary))) == _coordinator_expires(at)
    # Before KIP-211: commit time + retention (or the explicit expire time), whatever the group.
    pre = {(r.group, r.topic, r.partition) for r in report.where("pre_kip211_expires").collect()}
    expected_pre = set()
    for key, value in EXPIRY_RECORDS[:-2]:  # the tombstoned solo/orders/3 is gone already
        decoded = decode_key(key)
        if isinstance(decoded, OffsetCommitKey):
            commit = decode_offset_commit_value(value)
            deadline = commit.expire_timestamp if commit.expire_timestamp >= 0 else commit.commit_timestamp + RETENTION
            if at >= deadline:
                expected_pre.add((decoded.group, decoded.topic, decoded.partition))
    assert pre == expected_pre
    report.unpersist()


def test_expiry_report_columns(expiry_records):
    report = expiry_report.expiry_report(expiry_records, T, RETENTION)
    rows = {(r.group, r.topic, r.partition): r for r in report.collect()}
    assert len(rows) == 11  # solo 0-2, emptied 2, emptied-old, stable 3, opaque, connect
    assert rows[("emptied", "orders", 0)].group_state == "Empty"
    assert rows[("emptied", "orders", 0)].expires_at == datetime.datetime.fromtimestamp((T + 30 * MINUTE) / 1000)
    assert rows[("stable", "orders", 0)].expires_at is None
    assert rows[("stable", "payments", 1)].retention_base == datetime.datetime.fromtimestamp((T + 3 * MINUTE) / 1000)
    assert rows[("solo", "orders", 0)].group_state == "none"
    assert rows[("connect", "payments", 0)].pre_kip211_expires_at == datetime.datetime.fromtimestamp(
        (T + RETENTION) / 1000)
