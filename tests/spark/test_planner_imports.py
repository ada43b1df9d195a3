"""What every streaming query pays before its first batch: Spark plans a Python streaming source in
a fresh interpreter started for that query, which imports the source's module. That module must
not pull in what only the readers in the tasks need."""

from __future__ import annotations

import subprocess
import sys


def test_the_source_module_leaves_pyarrow_compute_to_the_tasks():
    # pyarrow.compute is the heaviest import the planner would not use: it builds no Arrow arrays.
    code = "import sys, tidemark.spark.source; print(sorted(m for m in sys.modules if m == 'pyarrow.compute'))"
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert answer.stdout.strip() == "[]"
