"""offsets.storage and dual.commit.enabled as the migration steps name them: a commit goes to the
chosen store, or to both with dual commit; a fetch with dual commit takes the larger offset."""

from __future__ import annotations

import pytest

from tidemark.consumer.offsets import OffsetStorage


class Store:
    def __init__(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self.offsets = dict(offsets or {})

    def commit(self, offsets):
        self.offsets.update(offsets)

    def fetch(self, partitions):
        return {tp: self.offsets[tp] for tp in partitions if tp in self.offsets}


@pytest.mark.parametrize("storage", ["zookeeper", "kafka"])
def test_without_dual_commit_only_the_chosen_store_is_written_and_read(storage: str) -> None:
    zk, kafka = Store({("t", 0): 9}), Store({("t", 0): 4})
    offsets = OffsetStorage(storage, False, zk, kafka)
    offsets.commit({("t", 1): 7})
    chosen, other = (zk, kafka) if storage == "zookeeper" else (kafka, zk)
    assert chosen.offsets[("t", 1)] == 7 and ("t", 1) not in other.offsets
    assert offsets.fetch([("t", 0), ("t", 2)]) == {("t", 0): chosen.offsets[("t", 0)]}


@pytest.mark.parametrize("storage", ["zookeeper", "kafka"])
def test_dual_commit_writes_both_and_reads_the_larger(storage: str) -> None:
    zk, kafka = Store({("t", 0): 9, ("t", 1): 2}), Store({("t", 0): 4, ("t", 1): 5, ("t", 2): 1})
    offsets = OffsetStorage(storage, True, zk, kafka)
    assert offsets.fetch([("t", 0), ("t", 1), ("t", 2), ("t", 3)]) == {("t", 0): 9, ("t", 1): 5, ("t", 2): 1}
    offsets.commit({("t", 3): 8})
    assert zk.offsets[("t", 3)] == kafka.offsets[("t", 3)] == 8


def test_an_unknown_storage_is_refused() -> None:
    with pytest.raises(ValueError, match="offsets.storage"):
        OffsetStorage("consul", True, Store(), Store())
