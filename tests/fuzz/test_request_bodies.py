"""Structurally valid requests with adversarial values, for every API and version the broker
serves: each must get a response kio decodes, on a connection that stays usable."""

from __future__ import annotations

import dataclasses
import datetime
import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from tests.fuzz.conftest import EXAMPLES, FUZZ, assert_broker_survived
from tests.fuzz.wire import API_VERSIONS, Conn, canary_ok, decode_response
from tests.wire.strategies import entities
from tidemark.records.batch import build_batch
from tidemark.wire.api_keys import ApiKey

PRODUCE, LIST_OFFSETS, JOIN_GROUP = 0, 2, 11
EXISTING_TOPIC = "fuzz-existing"

# Strings a broker has to be careful with, mixed into every string field.
SPECIAL_STRINGS = ["", ".", "..", "x" * 249, "x" * 250, "y" * 5000, "__consumer_offsets", EXISTING_TOPIC,
                   "bad/name", "\u00e9\u4e2d", "a\x00b"]
VALID_BATCH = build_batch([(b"k", b"v", (), 1_700_000_000_000)])

# Fields whose value is how long the broker may wait: bounded so a request is answered promptly
# (a fuzzed 24-day Fetch max_wait is honoured by Kafka too, and would only measure patience).
WAIT_FIELDS_MS = {"max_wait": 200, "timeout": 500, "rebalance_timeout": 500}
# Partition counts a CreateTopics/CreatePartitions may ask for: see the report for huge ones.
COUNT_FIELDS = {"num_partitions": 4, "count": 6}

_unique = itertools.count()


def adversarial(data: st.DataObject, value: object, name: str = "") -> object:
    """Walk a generated entity, mixing special strings, bounded waits and real batches in."""
    if dataclasses.is_dataclass(value):
        changes = {f.name: adversarial(data, getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(adversarial(data, item, name) for item in value)
    if isinstance(value, datetime.timedelta) and name in WAIT_FIELDS_MS:
        ms = data.draw(st.integers(-1, WAIT_FIELDS_MS[name]), label=name)
        return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))  # every wait field is int32 ms
    if isinstance(value, int) and not isinstance(value, bool) and name in COUNT_FIELDS:
        return type(value)(data.draw(st.integers(-2, COUNT_FIELDS[name]), label=name))
    if isinstance(value, str):
        return data.draw(st.sampled_from(SPECIAL_STRINGS) | st.just(value), label=name)
    if isinstance(value, bytes) and name == "records":
        return data.draw(st.sampled_from([VALID_BATCH, VALID_BATCH * 2]) | st.just(value), label=name)
    return value


def served_versions() -> list[tuple[int, int]]:
    """(api key, version) pairs to fuzz: what the broker advertises (ListOffsets v0 and Produce
    v0-v2 have no kio schema)."""
    from tidemark.broker.server import supported_versions

    return [(key, version) for key, (low, high) in sorted(supported_versions().items())
            for version in range(low, high + 1)
            if (key, version) != (LIST_OFFSETS, 0) and not (key == 0 and version < 3)]  # no kio schema


@pytest.fixture(scope="module")
def setup_topic(fuzz_broker):
    with Conn(fuzz_broker.bootstrap) as conn:
        response = conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": EXISTING_TOPIC, "num_partitions": 2,
                                                    "replication_factor": 1, "assignments": [], "configs": []}],
                                        "timeout": 10000, "validate_only": False})
        assert response.topics[0].error_code == 0


def api_ids() -> list:
    keys = sorted({key for key, _ in served_versions()})
    return [pytest.param(key, id=f"api{key}") for key in keys]


# Twenty-odd APIs: a quarter of the examples each keeps the module within its time budget.
PER_API = settings(FUZZ, max_examples=max(EXAMPLES // 4, 10))


@pytest.mark.parametrize("api_key", api_ids())
@PER_API
@given(data=st.data())
def test_request_is_answered(fuzz_broker, setup_topic, api_key, data):
    versions = [v for k, v in served_versions() if k == api_key]
    version = data.draw(st.sampled_from(versions), label="version")
    request_cls = load_request_schema(api_key, version)
    body = adversarial(data, data.draw(entities(request_cls), label="body"))
    if api_key == JOIN_GROUP:
        # A group of its own: joining someone else's fuzzed group waits for its members to rejoin.
        body = dataclasses.replace(body, group_id=f"fuzz-join-{next(_unique)}")
    with Conn(fuzz_broker.bootstrap) as conn:
        try:
            frame = conn.encode(api_key, version, body)
        except Exception:  # noqa: BLE001 - a value kio cannot write (a string too long for int16)
            assume(False)
        assert conn.send_frame(frame)
        if not (api_key == PRODUCE and body.acks == 0):  # acks=0: Kafka sends no response
            response = conn.recv_frame()
            assert response is not None, f"connection closed instead of answering api {api_key} v{version}"
            decode_response(api_key, version, response, conn.correlation_id)
        # The same connection still serves the next request.
        versions_response = conn.request(API_VERSIONS, 3, {"client_software_name": "fuzz",
                                                           "client_software_version": "1"})
        assert versions_response.error_code == 0
    assert canary_ok(fuzz_broker.bootstrap)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_topic_without_name_or_id(fuzz_broker, version):
    with Conn(fuzz_broker.bootstrap) as conn:
        response = conn.request(ApiKey.METADATA, version, {"topics": [{"topic_id": None, "name": None}],
                                                           "allow_auto_topic_creation": False,
                                                           "include_cluster_authorized_operations": False,
                                                           "include_topic_authorized_operations": False})
        assert [t.error_code for t in response.topics] == [ErrorCode.invalid_request]


def test_broker_survived(fuzz_broker, capsys):
    assert_broker_survived(fuzz_broker, capsys)
