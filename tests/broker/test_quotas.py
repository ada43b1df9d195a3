"""Client quotas: the managers on a controlled clock (exact throttle times), and on the wire:
DescribeClientQuotas/AlterClientQuotas, throttle_time_ms in a throttled response, the muted
connection, quotas kept across a restart."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.quotas.manager import DEFAULT, PRODUCE, REQUEST, ClientQuotas, SampledRate, candidates
from tidemark.broker.quotas.store import entity_path, parse_entity_path
from tidemark.broker import server
from tidemark.broker.server import Broker
from tidemark.coordinator.runtime.io import SystemClock
from tidemark.records.batch import build_batch

DESCRIBE, ALTER, PRODUCE_KEY, METADATA = 48, 49, 0, 3
T0 = 1_000_000


# -- the managers, on a clock the test moves ------------------------------------------------


def test_resolution_order_is_kafkas():
    assert list(candidates("alice", "app")) == [
        ("alice", "app"), ("alice", DEFAULT), ("alice", None), (DEFAULT, "app"), (DEFAULT, DEFAULT),
        (DEFAULT, None), (None, "app"), (None, DEFAULT)]
    quotas = ClientQuotas()
    quotas.set((None, DEFAULT), {PRODUCE: 10})
    quotas.set((None, "app"), {PRODUCE: 20})
    quotas.set(("alice", None), {PRODUCE: 30})
    assert quotas.quota(PRODUCE, "alice", "app") == (("alice", None), 30)
    assert quotas.quota(PRODUCE, "bob", "app") == ((None, "app"), 20)
    assert quotas.quota(PRODUCE, "bob", "other") == ((None, DEFAULT), 10)
    assert quotas.quota(REQUEST, "bob", "other") is None


def test_a_burst_is_spread_over_the_windows_span_and_throttled_by_what_exceeds_the_quota():
    quotas = ClientQuotas(samples=11, window_s=1)
    quotas.set((None, "app"), {PRODUCE: 1024})
    # 10 s span (11 windows, at least 10 whole): 10240 bytes at once is exactly the quota.
    assert quotas.record(PRODUCE, "ANONYMOUS", "app", 10240, T0) == 0
    # 10240 more: 2048 B/s, twice the quota: (2048 - 1024) / 1024 x 10 s.
    assert quotas.record(PRODUCE, "ANONYMOUS", "app", 10240, T0) == 10_000
    # Another client id without a quota of its own is not metered.
    assert quotas.record(PRODUCE, "ANONYMOUS", "other", 10**9, T0) == 0


def test_windows_older_than_the_span_are_forgotten():
    quotas = ClientQuotas(samples=11, window_s=1)
    quotas.set((None, "app"), {PRODUCE: 1024})
    assert quotas.record(PRODUCE, "u", "app", 20480, T0) == 10_000
    # 11 windows later the burst has aged out: the same bytes are within the quota again.
    assert quotas.record(PRODUCE, "u", "app", 10240, T0 + 11_000) == 0


def test_the_rate_is_over_the_time_elapsed_once_it_passes_the_minimum_span():
    rate = SampledRate(samples=3, window_ms=1000)
    rate.record(100, T0)
    assert rate.window_span_ms(T0) == 2000  # at least samples - 1 windows
    rate.record(100, T0 + 1500)
    rate.record(100, T0 + 2600)
    assert rate.window_span_ms(T0 + 2600) == 2600
    assert rate.rate(T0 + 2600) == pytest.approx(300 / 2.6)


def test_request_time_throttles_are_bounded_by_one_window():
    quotas = ClientQuotas(samples=11, window_s=1)
    quotas.set((DEFAULT, None), {REQUEST: 50})
    # 6 s of handler time at once: 600 percent-seconds over 10 s = 60 %, 10 over 50.
    assert quotas.record(REQUEST, "alice", "app", 600, T0) == 1000  # 2000 ms, bounded to the window
    quotas = ClientQuotas(samples=11, window_s=1)
    quotas.set((DEFAULT, None), {REQUEST: 50})
    assert quotas.record(REQUEST, "alice", "app", 525, T0) == 500  # (52.5 - 50) / 50 x 10 s


def test_a_default_quota_is_each_users_own_and_a_user_quota_is_shared_by_its_clients():
    quotas = ClientQuotas(samples=11, window_s=1)
    quotas.set((DEFAULT, None), {PRODUCE: 1024})
    assert quotas.record(PRODUCE, "alice", "a", 10240, T0) == 0
    assert quotas.record(PRODUCE, "bob", "a", 10240, T0) == 0  # bob's own rate
    assert quotas.record(PRODUCE, "alice", "b", 10240, T0) == 10_000  # alice's, whatever client


def test_entity_paths_are_kafkas():
    for entity, path in [(("alice", "app"), "users/alice/clients/app"), (("alice", None), "users/alice"),
                         ((None, DEFAULT), "clients/<default>"), ((DEFAULT, DEFAULT), "users/<default>/clients/<default>"),
                         (("a/b c", None), "users/a%2Fb%20c")]:
        assert entity_path(entity) == path
        assert parse_entity_path(path) == entity


# -- on the wire ------------------------------------------------------------------------------


class SteppedClock(SystemClock):
    """Stands still but when the test moves it; due callbacks run when it is moved past them."""

    def __init__(self) -> None:
        self.at_ms = T0
        self._due: list[tuple[int, object, object]] = []

    def now_ms(self) -> int:
        return self.at_ms

    def call_at(self, deadline_ms, callback):
        handle = _Handle()
        self._due.append((deadline_ms, handle, callback))
        return handle

    def advance(self, ms: int) -> None:
        self.at_ms += ms
        due = [d for d in self._due if d[0] <= self.at_ms]
        self._due = [d for d in self._due if d[0] > self.at_ms]
        for _, handle, callback in sorted(due, key=lambda d: d[0]):
            if not handle.cancelled:
                callback()


class _Handle:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@contextlib.asynccontextmanager
async def _broker(tmp_path, clock=None):
    broker = Broker(BrokerConfig({"offsets.topic.replication.factor": "1"}), tmp_path, port=0, clock=clock)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def _alter_body(entity, ops, validate_only=False):
    return {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                         "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops]}],
            "validate_only": validate_only}


def _described(response):
    assert response.error_code == ErrorCode.none, response.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def run(coroutine):
    asyncio.run(asyncio.wait_for(coroutine, 60))


def test_alter_and_describe_client_quotas_and_they_survive_a_restart(tmp_path):
    async def scenario():
        async with _broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            altered = await client.request(ALTER, 1, _alter_body(
                [("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 1024.0), ("request_percentage", 50.0)]))
            assert [e.error_code for e in altered.entries] == [ErrorCode.none]
            await client.request(ALTER, 0, _alter_body([("client-id", None)], [("consumer_byte_rate", 2048.0)]))
            refused = await client.request(ALTER, 1, _alter_body([("client-id", "x")], [("producer_byte_rate", 1.5)]))
            assert refused.entries[0].error_code == ErrorCode.invalid_request
            refused = await client.request(ALTER, 1, _alter_body([("client-id", "x")], [("no_such_quota", 1.0)]))
            assert refused.entries[0].error_code == ErrorCode.invalid_request
            await client.request(ALTER, 1, _alter_body([("client-id", "y")], [("producer_byte_rate", 9.0)], True))

            everything = {"components": [], "strict": False}
            expected = {(("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 1024.0, "request_percentage": 50.0},
                        (("client-id", None),): {"consumer_byte_rate": 2048.0}}
            assert _described(await client.request(DESCRIBE, 1, everything)) == expected
            only_default_clients = {"components": [{"entity_type": "client-id", "match_type": 1, "match": None}],
                                    "strict": True}
            assert _described(await client.request(DESCRIBE, 0, only_default_clients)) == {
                (("client-id", None),): {"consumer_byte_rate": 2048.0}}
            alice = {"components": [{"entity_type": "user", "match_type": 0, "match": "alice"}], "strict": False}
            assert list(_described(await client.request(DESCRIBE, 1, alice))) == [(("user", "alice"), ("client-id", "app"))]
            bad = await client.request(DESCRIBE, 1, {"components": [{"entity_type": "ip", "match_type": 2, "match": None}],
                                                     "strict": False})
            assert bad.error_code == ErrorCode.invalid_request

            await client.request(ALTER, 1, _alter_body([("user", "alice"), ("client-id", "app")], [("request_percentage", None)]))
            await client.close()
        async with _broker(tmp_path) as broker:  # kept in the data directory
            client = await AsyncRawClient.connect(broker.port)
            assert _described(await client.request(DESCRIBE, 1, {"components": [], "strict": False})) == {
                (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 1024.0},
                (("client-id", None),): {"consumer_byte_rate": 2048.0}}
            await client.close()

    run(scenario())


def _produce_body(topic: str, records: bytes) -> dict:
    return {"transactional_id": None, "acks": 1, "timeout": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def test_a_client_over_its_produce_quota_is_answered_with_the_throttle_time_and_muted_for_it(tmp_path):


    async def scenario():
        clock = SteppedClock()
        async with _broker(tmp_path, clock) as broker:
            client = await AsyncRawClient.connect(broker.port)  # unauthenticated: User:ANONYMOUS
            await client.request(METADATA, 9, {"topics": [{"name": "t"}], "allow_auto_topic_creation": True,
                                               "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            await client.request(ALTER, 1, _alter_body([("user", "ANONYMOUS")], [("producer_byte_rate", 100.0)]))
            records = build_batch([(None, b"x" * 1000, (), T0)])
            first = await client.request(PRODUCE_KEY, 9, _produce_body("t", records))
            # len(records) bytes over 10 s against 100 B/s.
            expected = round((len(records) / 10 - 100) / 100 * 10_000)
            assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert first.throttle_time.total_seconds() * 1000 == expected
            (connection,) = broker.connections
            assert connection.muted
            # The next request is read only once the throttle time has passed on the broker's clock.
            correlation_id = await client.send(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                             "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            await asyncio.sleep(0)
            clock.advance(expected - 1)
            assert connection.muted
            clock.advance(1)
            assert not connection.muted
            answered = await client.receive(METADATA, 9, correlation_id)
            assert answered.throttle_time.total_seconds() == 0
            await client.close()

    run(scenario())


def test_a_request_percentage_quota_throttles_any_request_by_at_most_one_window(tmp_path):
    async def scenario():
        clock = SteppedClock()
        async with _broker(tmp_path, clock) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await client.request(ALTER, 1, _alter_body([("user", "ANONYMOUS")], [("request_percentage", 1e-9)]))
            answered = await client.request(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            assert answered.throttle_time.total_seconds() * 1000 == 1000
            (connection,) = broker.connections
            assert connection.muted
            clock.advance(1000)
            assert not connection.muted
            await client.close()

    run(scenario())


def test_a_throttled_pipelining_client_has_one_request_handled_per_throttle(tmp_path):
    async def scenario():
        clock = SteppedClock()
        async with _broker(tmp_path, clock) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await client.request(ALTER, 1, _alter_body([("user", "ANONYMOUS")], [("request_percentage", 1e-9)]))
            first = await client.send(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            assert (await client.receive(METADATA, 9, first)).throttle_time.total_seconds() == 1
            (connection,) = broker.connections
            handled = []
            handler, low = broker.handlers[METADATA]

            async def counted(ctx, request):
                handled.append(request.correlation_id)
                return await handler(ctx, request)

            broker.handlers = {**broker.handlers, METADATA: (counted, low)}
            # Two more pipelined while muted: at the unmute only the first of them is handled,
            # and its throttled answer mutes the connection again before the second starts.
            second = await client.send(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            third = await client.send(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            clock.advance(1000)
            assert (await client.receive(METADATA, 9, second)).throttle_time.total_seconds() == 1
            assert connection.muted and connection.throttled
            assert handled == [second]
            clock.advance(1000)
            assert (await client.receive(METADATA, 9, third)).throttle_time.total_seconds() == 1
            # No quota any more: the next answer is not throttled, and the connection pipelines again.
            clock.advance(1000)
            await client.request(ALTER, 1, _alter_body([("user", "ANONYMOUS")], [("request_percentage", None)]))
            await client.request(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False})
            assert not connection.throttled and not connection.muted
            await client.close()

    run(scenario())


# -- what request time covers, on a perf counter the test moves ------------------------------

EMPTY_METADATA = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
                                               "include_cluster_authorized_operations": False}


def _frozen_perf_counter(monkeypatch) -> list[float]:
    """Request time is taken with time.perf_counter: frozen, every step costs nothing but what
    the test adds."""
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    return now


def test_decoding_a_request_counts_as_its_request_time(tmp_path, monkeypatch):
    """As Kafka counts its network threads' time: a frame's decoding is charged to the client and
    already counts for that request's own throttle."""
    now = _frozen_perf_counter(monkeypatch)
    decode = server.decode_request

    def slow_decode(frame, supported):
        if frame[:2] == METADATA.to_bytes(2, "big"):
            now[0] += 5.25  # 525 percent-seconds over the 10 s span: 52.5 %
        return decode(frame, supported)

    async def scenario():
        clock = SteppedClock()
        async with _broker(tmp_path, clock) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await client.request(ALTER, 1, _alter_body([("user", "ANONYMOUS")], [("request_percentage", 50.0)]))
            monkeypatch.setattr(server, "decode_request", slow_decode)
            answered = await client.request(METADATA, 9, EMPTY_METADATA)
            assert answered.throttle_time.total_seconds() * 1000 == 500  # (52.5 - 50) / 50 x 10 s
            await client.close()

    run(scenario())


def test_sending_a_response_counts_toward_the_next_throttle(tmp_path, monkeypatch):
    """Writing a response to the socket is charged to the client once it is written: the answer
    it was written with is not throttled, the next one is."""
    now = _frozen_perf_counter(monkeypatch)

    async def scenario():
        clock = SteppedClock()
        async with _broker(tmp_path, clock) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await client.request(ALTER, 1, _alter_body([("user", "ANONYMOUS")], [("request_percentage", 50.0)]))
            (connection,) = broker.connections
            write = connection.transport.write

            def slow_write(data):
                now[0] += 5.25
                write(data)

            connection.transport.write = slow_write
            first = await client.request(METADATA, 9, EMPTY_METADATA)
            assert first.throttle_time.total_seconds() == 0
            connection.transport.write = write
            second = await client.request(METADATA, 9, EMPTY_METADATA)
            assert second.throttle_time.total_seconds() * 1000 == 500
            await client.close()

    run(scenario())


def test_a_client_under_a_quota_has_its_pipelined_requests_handled_one_at_a_time(tmp_path):
    """As Kafka handles every connection's requests: the second request a client under a quota
    pipelined is not started while the first is in its handler (a throttle decided on the first
    answer must apply before it); a client without a quota pipelines."""
    async def scenario():
        async with _broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await client.request(ALTER, 1, _alter_body([("client-id", "raw-test")], [("request_percentage", 1e9)]))
            (connection,) = broker.connections
            entered, release = asyncio.Event(), asyncio.Event()
            handled = []
            handler, low = broker.handlers[METADATA]

            async def held(ctx, request):
                handled.append(request.correlation_id)
                entered.set()
                await release.wait()
                return await handler(ctx, request)

            broker.handlers = {**broker.handlers, METADATA: (held, low)}
            first = await client.send(METADATA, 9, EMPTY_METADATA)
            await entered.wait()
            second = await client.send(METADATA, 9, EMPTY_METADATA)
            while not connection._waiting and len(connection._pending) < 2:  # until the second is read
                await asyncio.sleep(0)
            assert len(connection._waiting) == 1 and len(connection._pending) == 1  # read, not started
            release.set()
            await client.receive(METADATA, 9, first)
            await client.receive(METADATA, 9, second)
            assert handled == [first, second]

            # Without a quota, the same two run side by side.
            await client.request(ALTER, 1, _alter_body([("client-id", "raw-test")], [("request_percentage", None)]))
            entered.clear()
            release.clear()
            third = await client.send(METADATA, 9, EMPTY_METADATA)
            fourth = await client.send(METADATA, 9, EMPTY_METADATA)
            while len(handled) < 4:
                await asyncio.sleep(0)
            release.set()
            await client.receive(METADATA, 9, third)
            await client.receive(METADATA, 9, fourth)
            await client.close()

    run(scenario())
