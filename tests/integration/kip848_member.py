"""One confluent-kafka consumer in a process of its own (so a test can SIGKILL it), reporting
on stdout, one JSON line per event, with time.monotonic() (shared by processes on a machine):
assign/revoke/lost (from the rebalance callbacks, which run inside poll, so nothing of a revoked
partition is returned after its revoke), record, commit (its error code), closed.

    python -m tests.integration.kip848_member BOOTSTRAP GROUP TOPIC NAME PROTOCOL
"""

from __future__ import annotations

import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException

STALE_MEMBER_EPOCH = 113


def main() -> None:
    bootstrap, group, topic, name, protocol = sys.argv[1:6]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def emit(kind: str, **fields: object) -> None:
        print(json.dumps({"t": time.monotonic(), "kind": kind, "member": name, **fields}), flush=True)

    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
              "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                       "partition.assignment.strategy": "cooperative-sticky"})
    consumer = Consumer(config)
    consumer.subscribe([topic],
                       on_assign=lambda c, ps: emit("assign", partitions=[p.partition for p in ps]),
                       on_revoke=lambda c, ps: emit("revoke", partitions=[p.partition for p in ps]),
                       on_lost=lambda c, ps: emit("lost", partitions=[p.partition for p in ps]))
    while not stopping:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        emit("record", partition=message.partition(), offset=message.offset(), value=message.value().decode())
        # A commit racing an epoch bump is refused STALE_MEMBER_EPOCH (Kafka's strict check):
        # it is retried, as Kafka's Java consumer retries it, once the heartbeat brings the epoch.
        for _ in range(100):
            try:
                consumer.commit(message=message, asynchronous=False)
                emit("commit", error=0)
                break
            except KafkaException as exc:
                emit("commit", error=exc.args[0].code())
                if exc.args[0].code() != STALE_MEMBER_EPOCH:
                    break
                time.sleep(0.05)
    consumer.close()
    emit("closed")


if __name__ == "__main__":
    main()
