"""`tidemark serve 2>&1 | tee log` and Ctrl-C: the reader goes first, the broker still shuts down
cleanly (exit 0, clean on the next start); a new data directory is not called unclean."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import BrokerProcess, free_port

HANG_GUARD_S = 120.0


def serve_args(data_dir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "tidemark.cli", "serve", "--listen", f"127.0.0.1:{port}", "--data-dir",
            str(data_dir), "--log-format", "json"]


def logs_loaded(log_text: str) -> dict:
    (line,) = [json.loads(line) for line in log_text.splitlines() if '"logs_loaded"' in line]
    return line


def test_ctrl_c_after_the_log_reader_is_gone_is_a_clean_shutdown(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    process = subprocess.Popen(serve_args(data_dir, port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if b"tidemark listening on" in line:
                break
        process.stderr.close()  # tee got the Ctrl-C too and is gone
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=HANG_GUARD_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    again = BrokerProcess(data_dir, port=port).start()
    try:
        again.wait_for_log('"logs_loaded"')
        assert logs_loaded(again.log_text())["clean_shutdown"] is True
    finally:
        assert again.stop() == 0


def test_a_new_data_directory_is_not_an_unclean_shutdown(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        broker.wait_for_log('"logs_loaded"')
        line = logs_loaded(broker.log_text())
        assert "clean_shutdown" not in line
        assert line["new_data_dir"] is True
    finally:
        assert broker.stop() == 0
