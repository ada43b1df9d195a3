"""Controller fencing on broker processes: a controller paused (SIGSTOP) past
zookeeper.session.timeout.ms is replaced; leadership changes while it is paused; once resumed
(SIGCONT) and registered again, nothing in ZooKeeper was written by it: /controller_epoch is the
new controller's, and every partition state the new term changed carries the new epoch. Every
wait is on an event seen in ZooKeeper, bounded."""

from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient, NewTopic

from tests.zk.test_cluster_brokers import WAIT_S, _bootstrap, _cluster, _until

PARTITIONS = 3


class Znodes:
    """The cluster's znodes under the test's chroot, read with the test's own session."""

    def __init__(self, zk, chroot: str) -> None:
        self.zk = zk
        self.root = "/" + chroot.split("/", 1)[1]

    def controller(self) -> int:
        stat = self.zk.exists(f"{self.root}/controller")
        return json.loads(self.zk.get(f"{self.root}/controller")[0])["brokerid"] if stat else -1

    def controller_epoch(self) -> tuple[int, int]:
        data, stat = self.zk.get(f"{self.root}/controller_epoch")
        return int(data), stat.version

    def registration(self, broker_id: int) -> int | None:
        """The czxid of the broker's registration (a new one after a session expiry)."""
        stat = self.zk.exists(f"{self.root}/brokers/ids/{broker_id}")
        return stat.czxid if stat else None

    def states(self, topic: str) -> dict[int, tuple[dict, int]]:
        """partition -> (state JSON, zk version)"""
        states = {}
        for partition in range(PARTITIONS):
            data, stat = self.zk.get(f"{self.root}/brokers/topics/{topic}/partitions/{partition}/state")
            states[partition] = (json.loads(data), stat.version)
        return states


def test_a_controller_paused_past_its_session_and_resumed_writes_nothing(make_broker, chroot, zk):
    brokers = _cluster(make_broker, chroot)
    znodes = Znodes(zk, chroot)
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", PARTITIONS, 3)])["orders"].result(WAIT_S)
    _until(lambda: all(len(s["isr"]) == 3 for s, _ in znodes.states("orders").values()), "three in-sync replicas")
    old = znodes.controller()
    old_epoch, _ = znodes.controller_epoch()
    old_registration = znodes.registration(old)

    brokers[old].pause()  # SIGSTOP past zookeeper.session.timeout.ms: the others elect a controller
    _until(lambda: znodes.controller() not in (-1, old), "another broker controls")
    new = znodes.controller()
    new_epoch, new_epoch_version = znodes.controller_epoch()
    assert new_epoch == old_epoch + 1
    # Meanwhile, a leadership change: the third broker is lost too and the new controller, the
    # last one standing, leads every partition.
    lost = next(b for b in brokers if b not in (old, new))
    brokers[lost].kill()
    _until(lambda: all((s["leader"], s["isr"]) == (new, [new]) for s, _ in znodes.states("orders").values()),
           "the new controller leads every partition alone")
    before = znodes.states("orders")
    assert all(s["controller_epoch"] == new_epoch for s, _ in before.values())

    brokers[old].resume()  # it still believes it controls, until it learns its session expired
    _until(lambda: znodes.registration(old) not in (None, old_registration), "the resumed broker registered again")

    def nothing_from_the_old_controller() -> None:
        assert (znodes.controller(), znodes.controller_epoch()) == (new, (new_epoch, new_epoch_version))
        for partition, (state, version) in znodes.states("orders").items():
            was, was_version = before[partition]
            # Only the new controller changes leaders (and bumps the leader epoch); leaders
            # change their ISR themselves, keeping the epoch of the controller that elected them.
            assert state["controller_epoch"] == new_epoch, (partition, state)
            assert state["leader_epoch"] >= was["leader_epoch"] and version >= was_version, (partition, state)
            if state["leader_epoch"] == was["leader_epoch"]:
                assert state["leader"] == was["leader"], (partition, state)

    nothing_from_the_old_controller()
    # The resumed broker follows again and rejoins the ISRs (its controller thread has long run
    # whatever it had queued), then leaves with a controlled shutdown the new controller handles.
    _until(lambda: all(old in s["isr"] for s, _ in znodes.states("orders").values()), "the resumed broker in sync")
    nothing_from_the_old_controller()
    brokers[old].stop()
    nothing_from_the_old_controller()
