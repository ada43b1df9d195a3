"""A broker's ISR maintenance outlives its ZooKeeper session: broker 1, paused past its session
timeout, resumes (ZooKeeper held paused meanwhile) with an ISR write that meets its lost
session; once it leads again, a follower that dropped out of the ISR and caught up is taken back
in by broker 1 (its ISR loop did not die with the session), and broker 1 is still running."""

from __future__ import annotations

from tests.integration.raw import RawClient
from tests.zk.cluster_nodes import WAIT_S, Observer
from tests.zk.test_cluster_brokers import _cluster
from tidemark.cluster.zk import topic_admin
from tidemark.cluster.zk.metadata_view import ClusterSnapshot
from tidemark.cluster.zk.preferred_election import request_preferred_election
from tidemark.wire.api_keys import ApiKey

TOPIC = "orders"


def _leader(s: ClusterSnapshot) -> int:
    view = s.partitions.get((TOPIC, 0))
    return view.leader if view is not None else -1


def _isr(s: ClusterSnapshot) -> set[int]:
    view = s.partitions.get((TOPIC, 0))
    return set(view.isr) if view is not None else set()


def test_isr_maintenance_survives_a_session_expiry(make_broker, zookeeper, chroot: str, observer: Observer) -> None:
    brokers = _cluster(make_broker, chroot)
    topic_admin.create_topic(observer.client, TOPIC, 1, 3, assignment={0: (1, 2, 3)})
    observer.wait(lambda s: _leader(s) == 1 and _isr(s) == {1, 2, 3}, "broker 1 leads a full ISR")
    brokers[1].wait_for_log('"became_leader"', timeout_s=WAIT_S)  # and acts on it

    brokers[1].pause()  # past its session timeout: ZooKeeper expires the session, another broker leads
    try:
        observer.wait(lambda s: 1 not in s.brokers and _leader(s) not in (1, -1), "broker 1's session expired")
        # Broker 1 resumes still believing it leads, with followers silent past
        # replica.lag.time.max.ms: its ISR loop writes at once, while its session is gone
        # (ZooKeeper is held paused until broker 1's event loop has run), so the write fails
        # with ConnectionLoss or SessionExpiredError unless kazoo still held it unsent.
        zookeeper.pause()
        try:
            brokers[1].resume()
            with RawClient(brokers[1].bootstrap) as client:  # its event loop ran: the write was issued
                assert client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                              "client_software_version": "1"}).error_code == 0
        finally:
            zookeeper.resume()
    finally:
        brokers[1].resume()
    observer.wait(lambda s: 1 in s.brokers and 1 in _isr(s), "broker 1 registered again and caught up")
    assert request_preferred_election(observer.client, [(TOPIC, 0)], WAIT_S)
    observer.wait(lambda s: _leader(s) == 1, "broker 1 leads again")

    brokers[3].pause()  # out of the ISR (by broker 1's shrink or by the controller)
    try:
        observer.wait(lambda s: 3 not in _isr(s), "broker 3 out of the ISR")
    finally:
        brokers[3].resume()
    observer.wait(lambda s: _leader(s) == 1 and _isr(s) == {1, 2, 3}, "broker 1 took broker 3 back into the ISR")
    assert brokers[1].process.poll() is None, "broker 1 is running"
