"""The ZooKeeper consumer's rebalancing algorithm (seed 002): sorted partitions, sorted consumer
threads, contiguous ranges; Kafka's range assignment gives the remainder to the first threads."""

from __future__ import annotations

from tidemark.consumer.assignment import owned_by, range_assign


def ranges(owners: dict[tuple[str, int], str], topic: str) -> dict[str, list[int]]:
    by_thread: dict[str, list[int]] = {}
    for (t, partition), thread in sorted(owners.items()):
        if t == topic:
            by_thread.setdefault(thread, []).append(partition)
    return by_thread


def test_partitions_divide_evenly_into_contiguous_ranges_in_sorted_consumer_order() -> None:
    # Registered in any order, listed in any order: thread i gets i*N .. (i+1)*N - 1.
    owners = range_assign({"t": [5, 3, 1, 0, 2, 4]}, {"c3": {"t": 1}, "c1": {"t": 1}, "c2": {"t": 1}})
    assert ranges(owners, "t") == {"c1-0": [0, 1], "c2-0": [2, 3], "c3-0": [4, 5]}


def test_the_remainder_goes_to_the_first_threads_so_no_partition_is_left_over() -> None:
    owners = range_assign({"t": list(range(8))}, {"a": {"t": 1}, "b": {"t": 1}, "c": {"t": 1}})
    assert ranges(owners, "t") == {"a-0": [0, 1, 2], "b-0": [3, 4, 5], "c-0": [6, 7]}


def test_more_consumers_than_partitions_leaves_the_last_ones_idle() -> None:
    owners = range_assign({"t": [0, 1]}, {"a": {"t": 1}, "b": {"t": 1}, "c": {"t": 1}})
    assert owners == {("t", 0): "a-0", ("t", 1): "b-0"}
    assert owned_by(owners, "c") == {}


def test_each_topic_is_divided_among_only_the_consumers_of_that_topic_by_their_stream_counts() -> None:
    owners = range_assign({"t": list(range(4)), "u": [0, 1, 2], "nobody": [0]},
                          {"a": {"t": 2, "u": 1}, "b": {"t": 1}})
    assert ranges(owners, "t") == {"a-0": [0, 1], "a-1": [2], "b-0": [3]}
    assert ranges(owners, "u") == {"a-0": [0, 1, 2]}
    assert ("nobody", 0) not in owners
    assert owned_by(owners, "b") == {("t", 3): "b-0"}


def test_every_consumer_computes_the_same_answer() -> None:
    registry = {f"host:{n}": {"t": 1} for n in (7, 2, 9, 4)}
    views = [range_assign({"t": list(range(10))}, dict(reversed(list(registry.items())))),
             range_assign({"t": list(reversed(range(10)))}, registry)]
    assert views[0] == views[1]
    assert sorted(views[0]) == [("t", p) for p in range(10)]
