"""Prometheus metrics on an opt-in port, and structured (JSON) logs."""

from __future__ import annotations

import json
import urllib.request

from tests.conftest import free_port
from tests.integration.clients import create_topic, produce_all


def test_metrics_and_json_logs(make_broker):
    metrics_port = free_port()
    broker = make_broker(extra_args=("--metrics-port", str(metrics_port))).start()
    create_topic(broker.bootstrap, "observed", 1)
    produce_all(broker.bootstrap, "observed", [(0, None, b"m%d" % i) for i in range(10)])
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples["tidemark_messages_in_total"] == 10
    assert samples['tidemark_requests_total{api="produce"}'] >= 1
    assert samples["tidemark_partitions"] == 1
    assert samples["tidemark_log_flush_seconds_count"] >= 1
    assert broker.stop() == 0

    events = [json.loads(line) for line in broker.log_text().splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert "broker_started" in names and "topic_created" in names and "broker_stopped" in names
    started = next(e for e in events if e["event"] == "broker_started")
    assert started["listen"] == broker.bootstrap and "timestamp" in started and started["level"] == "info"
