"""`make demo` end to end (smaller): its own broker, its own SparkSession, in a child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_counts_every_event_once_and_ends_with_zero_lag():
    result = subprocess.run([sys.executable, "-m", "demo.pipeline", "--events", "3000"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "every event counted exactly once: yes" in result.stdout
    assert "lag of demo-pipeline is 0 on every partition: yes" in result.stdout
    assert "pipeline stopped halfway after counting 1500 events" in result.stdout
