"""A stalled ZooKeeper does not stall data: with ZooKeeper SIGSTOPped and CreateTopics requests
parked on it, an acks=all produce to a healthy partition still completes, while ZooKeeper is
still stopped (the ZooKeeper calls run on the session's own threads, each with a timeout; the
flusher's threads stay free)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.raw import RawClient
from tests.zk.offsets_cluster import until
from tidemark.records.batch import build_batch
from tidemark.wire.api_keys import ApiKey

HANG_GUARD_S = 30.0  # a bound that ends a hung test, not a margin
PARKED_CREATES = 6  # asyncio's default executor on two cores has 6 threads
# A session that outlives the stall: kazoo notices a silent server only after 2/3 of it, and
# until then every call it was handed waits.


def _stopped(pid: int) -> bool:
    """Whether the process is in the stopped state (SIGSTOP)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _create_topics_frame(client: RawClient, name: str) -> bytes:
    return client.encode(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                 "timeout": 10000, "validate_only": False})


def test_acks_all_produce_completes_while_zookeeper_is_stopped(zookeeper, chroot, make_broker):
    broker = make_broker({"zookeeper.connect": chroot, "broker.id": "1", "zookeeper.session.timeout.ms": "60000",
                          "offsets.topic.replication.factor": "1"}).start()
    with RawClient(broker.bootstrap) as client:
        assert until(lambda: client.create_topic("healthy").error_code in (0, 36), "the topic") is not None
        first = until(lambda: (r := client.produce("healthy", build_batch([(None, b"before", (), 1)]))).error_code == 0
                      and r, "a first acknowledged produce")
        assert first.base_offset == 0

    creators: list[RawClient] = []
    zookeeper.pause()
    try:
        for i in range(PARKED_CREATES):
            creator = RawClient(broker.bootstrap)
            creators.append(creator)
            creator.send_frame(_create_topics_frame(creator, f"stalled-{i}"))
        # A round trip after the CreateTopics were sent: the broker has read them and started
        # their handlers (tasks start in the order their frames were read).
        with RawClient(broker.bootstrap) as barrier:
            assert barrier.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
        with RawClient(broker.bootstrap) as client:
            client.sock.settimeout(HANG_GUARD_S)
            response = client.produce("healthy", build_batch([(None, b"during", (), 1)]))
            assert _stopped(zookeeper.process.pid), "the produce must complete while ZooKeeper is stopped"
        assert response.error_code == 0
        assert response.base_offset == 1
    finally:
        zookeeper.resume()
        for creator in creators:
            creator.close()
