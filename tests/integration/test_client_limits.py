"""Resources a client must not be able to exhaust: connections (max.connections,
max.connections.per.ip and its overrides) and the size of a fetch response (fetch.max.bytes)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

METADATA = 3


def _served(client: RawClient) -> bool:
    response = client.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
    return [b.node_id for b in response.brokers] == [0]


def _admitted(bootstrap: str, source_host: str | None = None) -> RawClient:
    """A served connection; retried while the broker has yet to notice that the start-up probe
    connection (BrokerProcess.start) is gone, which may briefly take a slot."""
    for _ in range(100):
        client = RawClient(bootstrap, source_host)
        try:
            if _served(client):
                return client
        except ConnectionError:
            pass
        client.close()
    raise AssertionError("no connection was admitted")


def test_connection_over_max_connections_is_closed_while_the_others_are_served(make_broker):
    broker = make_broker({"max.connections": "3"}).start()
    clients = [_admitted(broker.bootstrap) for _ in range(3)]
    try:
        assert all(_served(c) for c in clients)
        with RawClient(broker.bootstrap) as extra:
            assert extra.is_closed_by_peer()
        assert all(_served(c) for c in clients)
    finally:
        for c in clients:
            c.close()
    assert '"limit": "max.connections"' in broker.log_text()


def test_max_connections_per_ip_and_its_overrides(make_broker):
    broker = make_broker({"max.connections.per.ip": "1",
                          "max.connections.per.ip.overrides": "127.0.0.2:2"}).start()
    with _admitted(broker.bootstrap) as first:
        with RawClient(broker.bootstrap) as second:
            assert second.is_closed_by_peer()
        # Another address has its own count, here with a higher limit.
        with RawClient(broker.bootstrap, "127.0.0.2") as a, RawClient(broker.bootstrap, "127.0.0.2") as b:
            assert _served(a) and _served(b)
            with RawClient(broker.bootstrap, "127.0.0.2") as c:
                assert c.is_closed_by_peer()
            assert _served(first)
    assert '"limit": "max.connections.per.ip"' in broker.log_text()


def test_fetch_max_bytes_bounds_the_response_except_one_first_batch(make_broker):
    one_batch = len(build_batch([(None, b"y" * 100, (), 1)]))
    broker = make_broker({"fetch.max.bytes": str(3 * one_batch)}).start()
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("bounded", partitions=2).error_code == ErrorCode.none
        for p in (0, 1):
            for _ in range(10):
                assert client.produce("bounded", build_batch([(None, b"y" * 100, (), 1)]), partition=p).error_code == 0
        assert client.produce("bounded", build_batch([(None, b"z" * 1000, (), 1)]), partition=1).error_code == 0
        # The request allows 1 MiB; the broker's fetch.max.bytes wins.
        first, second = client.fetch([("bounded", 0, 0, 1 << 20), ("bounded", 1, 0, 1 << 20)], max_bytes=1 << 20)
        assert len(first.records) == 3 * one_batch and second.records == b""
        # KIP-74: a first batch larger than the bound still comes back, whole, and alone.
        big, after = client.fetch([("bounded", 1, 10, 1 << 20), ("bounded", 0, 0, 1 << 20)], max_bytes=1 << 20)
        assert len(big.records) > 3 * one_batch
        assert int.from_bytes(big.records[:8], "big") == 10 and after.records == b""
