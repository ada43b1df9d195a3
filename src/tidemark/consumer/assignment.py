"""The ZooKeeper consumer's rebalancing algorithm (Kafka's range assignment), as a pure function.

For each topic: sort its partitions, sort the consumer threads that consume it, and give thread
i the contiguous range starting at i*N (N = partitions // threads); as Kafka's RangeAssignor for
the ZooKeeper consumer, the first (partitions % threads) threads take one partition more, so
none is left over. Every consumer computes the same answer from the same registry, which is what
lets them agree without talking to each other.
"""

from __future__ import annotations

from collections.abc import Mapping


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    """A consumer's thread ids for a topic it reads with `streams` streams (Kafka: id-0, id-1...)."""
    return [f"{consumer_id}-{n}" for n in range(streams)]


def range_assign(partitions: Mapping[str, list[int]],
                 subscriptions: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], str]:
    """The owner thread of every partition.

    partitions: topic -> its partition ids; subscriptions: consumer id -> {topic: #streams}
    (the value of /consumers/[group]/ids/[consumer_id]). Topics nobody subscribes to are not
    assigned; consumers beyond the number of partitions get nothing.
    """
    owners: dict[tuple[str, int], str] = {}
    for topic in sorted(partitions):
        threads = sorted(t for consumer, counts in subscriptions.items()
                         for t in thread_ids(consumer, counts.get(topic, 0)))
        if not threads:
            continue
        ordered = sorted(partitions[topic])
        per_thread, extra = divmod(len(ordered), len(threads))
        for i, thread in enumerate(threads):
            start = per_thread * i + min(i, extra)
            count = per_thread + (1 if i < extra else 0)
            for partition in ordered[start:start + count]:
                owners[topic, partition] = thread
    return owners


def owned_by(owners: Mapping[tuple[str, int], str], consumer_id: str) -> dict[tuple[str, int], str]:
    """The partitions (and the thread) a consumer's own threads were given."""
    prefix = consumer_id + "-"
    return {tp: thread for tp, thread in owners.items()
            if thread.startswith(prefix) and thread[len(prefix):].isdigit()}
