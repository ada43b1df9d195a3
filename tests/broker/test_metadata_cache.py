"""Metadata's cached partition entries: every answer is byte for byte the one built afresh,
across any sequence of metadata changes (leaders, epochs, ISRs, replicas, brokers coming and
going, partitions added) and requests of any version."""

from __future__ import annotations

import uuid
from types import MappingProxyType, SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema

from tidemark.broker.apis import metadata
from tidemark.broker.apis.metadata_cache import partition_class
from tidemark.cluster.zk.metadata_view import ClusterSnapshot, PartitionView
from tidemark.cluster.zk.zk_data import PartitionState
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.build import build
from tidemark.wire.codec import Request, encode_response

TOPICS = ("orders", "payments")
BROKERS = (1, 2, 3)
VERSIONS = range(0, 14)


class SingleNode:
    """A single node's partition manager as Metadata reads it: each partition's leader epoch."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], SimpleNamespace] = {}


class Model:
    """The broker's metadata, changed in place (single node) or snapshot by snapshot (cluster)."""

    def __init__(self, clustered: bool) -> None:
        self.manager = SingleNode()
        self.counts = dict.fromkeys(TOPICS, 0)
        self.ids = {t: uuid.uuid4() for t in TOPICS}
        self.clustered = clustered
        self.live = set(BROKERS)
        self.views: dict[tuple[str, int], PartitionView] = {}
        self.snapshot = self._snapshot()
        for topic in TOPICS:
            self.add_partition(topic)

    def _snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(MappingProxyType({b: object() for b in self.live}), min(self.live, default=-1),
                               MappingProxyType({}), MappingProxyType(dict(self.views)))

    def add_partition(self, topic: str) -> None:
        index = self.counts[topic]
        self.counts[topic] += 1
        self.manager.partitions[(topic, index)] = SimpleNamespace(leader_epoch=0)
        self.views[(topic, index)] = PartitionView(topic, index, (1, 2), PartitionState(1, 0, (1, 2), 1))
        self.snapshot = self._snapshot()

    def apply(self, change: tuple) -> None:
        kind, topic, index, a, b = change
        index %= self.counts[topic]
        if kind == "add":
            self.add_partition(topic)
        elif kind == "epoch":  # single node: the partition object changes in place
            self.manager.partitions[(topic, index)].leader_epoch += 1
        elif kind == "state":  # leader, epoch and ISR (a partition without a state gets one)
            view = self.views.get((topic, index)) or PartitionView(topic, index, (1, 2), None)
            self.views[(topic, index)] = PartitionView(topic, index, view.replicas,
                                                       PartitionState(a, view.leader_epoch + 1, (a, b), 1))
        elif kind == "replicas":
            view = self.views.get((topic, index)) or PartitionView(topic, index, (1, 2), None)
            self.views[(topic, index)] = PartitionView(topic, index, (a, b), view.state)
        elif kind == "no_state":
            self.views.pop((topic, index), None)
        elif kind == "broker_gone":
            self.live.discard(a)
        elif kind == "broker_back":
            self.live.add(a)
        self.snapshot = self._snapshot()

    def ctx(self, version: int) -> SimpleNamespace:
        cluster = SimpleNamespace(snapshot=self.snapshot) if self.clustered else None
        return SimpleNamespace(cluster=cluster, node=SimpleNamespace(id=1), partitions=self.manager,
                               api_version=version)

    def topic(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, topic_id=self.ids[name], internal=False, partitions=self.counts[name])


def _encode(version: int, topic: dict) -> bytes:
    body = {"throttle_time": 0, "cluster_authorized_operations": -2147483648, "brokers": [],
            "cluster_id": "c", "controller_id": 1, "error_code": 0,
            "topics": [{**topic, "topic_authorized_operations": -2147483648}]}
    request = Request(ApiKey.METADATA, version, 7, "client", None, False)
    return encode_response(request, build(load_response_schema(ApiKey.METADATA, version), body))


def _fresh(ctx: SimpleNamespace, topic: SimpleNamespace) -> dict:
    """The topic entry with its partitions built from dicts, as before there was a cache."""
    return {"error_code": 0, "name": topic.name, "topic_id": topic.topic_id, "is_internal": False,
            "partitions": [metadata._partition_entry(ctx, topic.name, i) for i in range(topic.partitions)]}


changes = st.tuples(st.sampled_from(["add", "epoch", "state", "replicas", "no_state", "broker_gone", "broker_back"]),
                    st.sampled_from(TOPICS), st.integers(0, 10), st.sampled_from(BROKERS), st.sampled_from(BROKERS))
requests = st.tuples(st.sampled_from(list(VERSIONS)), st.sampled_from(TOPICS))
steps = st.lists(st.one_of(changes.map(lambda c: ("change", c)), requests.map(lambda r: ("request", r))),
                 min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(clustered=st.booleans(), steps=steps)
def test_cached_answers_are_the_fresh_ones_across_changes(clustered, steps):
    model = Model(clustered)
    for kind, step in steps:
        if kind == "change":
            model.apply(step)
            continue
        version, name = step
        ctx, topic = model.ctx(version), model.topic(name)
        for _ in range(2):  # the second answer comes from the cache
            assert _encode(version, metadata.topic_entry(ctx, topic)) == _encode(version, _fresh(ctx, topic))


def test_an_unchanged_topic_is_answered_from_the_cache():
    model = Model(clustered=True)
    ctx, topic = model.ctx(12), model.topic("orders")
    first = metadata.topic_entry(ctx, topic)["partitions"]
    assert metadata.topic_entry(ctx, topic)["partitions"] is first
    assert all(type(p) is partition_class(12) for p in first)
    model.apply(("state", "orders", 0, 2, 3))
    assert metadata.topic_entry(model.ctx(12), topic)["partitions"] is not first
