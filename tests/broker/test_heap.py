"""The broker process's collector: pauses are measured, and the startup heap is frozen out of
full collections. Run in a fresh interpreter: freezing is for the whole process."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, json
from prometheus_client import REGISTRY
from tidemark.broker import heap

heap.observe_gc_pauses()
heap.observe_gc_pauses()  # once per process, however often asked
kept = [[i] for i in range(5000)]  # long-lived containers, as a broker's wiring is
gc.collect()
full_collections = REGISTRY.get_sample_value("tidemark_gc_pause_seconds_count", {"generation": "2"})
frozen = heap.freeze_startup_heap()
print(json.dumps({"full_collections": full_collections, "frozen": frozen,
                  "tracked_after": len(gc.get_objects()), "callbacks": gc.callbacks.count(heap._observe)}))
"""


def test_pauses_are_counted_and_the_startup_heap_leaves_full_collections():
    answer = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(answer.stdout)
    assert seen["callbacks"] == 1
    assert seen["full_collections"] == 1.0
    # The 5,000 lists and everything imported are frozen; what a full collection still walks is
    # only what was made after.
    assert seen["frozen"] > 5000
    assert seen["tracked_after"] < 1000


CHURN = """
import gc, json, weakref
from tidemark.broker import heap

heap.freeze_startup_heap()
young = [0]
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 0
                    and young.__setitem__(0, young[0] + 1))
kept = []
for commit in range(200):
    # A 100-partition commit's shape: some 1,500 tracked objects alive at once (the decoded
    # request, the records, the response dicts), all freed by reference counting when it is
    # answered, one survivor now and then (a cached offset).
    request = [{"partition": p, "offset": commit, "metadata": ("", p)} for p in range(500)]
    response = [{"partition": p, "error_code": 0} for p in range(500)]
    kept.append((commit, request[0]["offset"]))
    del request, response
churn_collections = young[0]

class Node:
    pass

freed = []
for i in range(200_000):  # cyclic garbage: only the collector frees it
    node = Node()
    node.self = node
    if i % 1000 == 0:
        weakref.finalize(node, freed.append, i)
del node
print(json.dumps({"churn_collections": churn_collections, "cycles_freed": len(freed),
                  "young_count": gc.get_count()[0], "threshold": gc.get_threshold()[0]}))
"""


def test_commit_churn_runs_few_young_collections_and_cycles_are_still_freed():
    answer = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(answer.stdout)
    # 200 commit-shaped bursts: at Python's default threshold (700) each burst collects the
    # young generation at least once.
    assert seen["churn_collections"] <= 20, seen
    # Garbage in cycles is still collected, within a bounded number of allocations.
    assert seen["cycles_freed"] >= 190, seen
    assert seen["young_count"] <= seen["threshold"], seen
