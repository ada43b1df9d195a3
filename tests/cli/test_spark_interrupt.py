"""Ctrl-C during a Spark job: one line and exit code 130, no py4j tracebacks about the JVM that
the same Ctrl-C stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tidemark.hold import HOLD_AT
from tidemark.records import build_batch
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value

T = 1_700_000_000_000
HANG_GUARD_S = 600.0


def test_ctrl_c_during_a_job_is_one_line_and_exit_130(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "__consumer_offsets-0").mkdir(parents=True)
    commit = (encode_key(OffsetCommitKey("etl", "orders", 0)),
              encode_offset_commit_value(OffsetCommitValue(4, 2, "", T)), (), T)
    (data_dir / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(build_batch([commit]))
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        # A session of its own, as a terminal's foreground job: Ctrl-C reaches the JVM as well.
        process = subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli", "spark", "lag-report", "--data-dir", str(data_dir), "--master",
             "local[1]"], stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, HOLD_AT: "lag_report", "PYSPARK_PYTHON": sys.executable})
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while b"held" not in out.read_bytes():
            assert process.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the job never reached its hold point"
            time.sleep(0.1)
        before = len(err.read_bytes())
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=HANG_GUARD_S) == 130
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    after = err.read_bytes()[before:].decode()
    assert after.strip().splitlines() == ["interrupted"], after[-3000:]
    assert "Traceback" not in err.read_text()
