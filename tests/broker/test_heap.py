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
