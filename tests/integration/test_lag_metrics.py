"""Consumer lag on the broker's Prometheus endpoint, scraped from a live broker and compared with
`tidemark groups describe --output json` for the same groups."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.cli.test_group_lag import commit, described, produce_at
from tests.conftest import GROUP_SETTINGS, free_port
from tests.integration.clients import create_topic

LAG_FAMILIES = ("tidemark_consumergroup_lag", "tidemark_consumergroup_lag_seconds",
                "tidemark_consumergroup_committed_offset", "tidemark_consumergroup_status")


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """family -> {(group, topic, partition[, status]): value} for the consumer group families."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("tidemark_consumergroup_"):
                labels = sample.labels
                key = tuple(labels[k] for k in ("group", "topic", "partition", "status") if k in labels)
                found.setdefault(sample.name, {})[key] = sample.value
    return found


def start(make_broker, **settings: str):
    port = free_port()
    broker = make_broker({**GROUP_SETTINGS, **settings}, extra_args=("--metrics-port", str(port))).start()
    return broker, port


def test_lag_series_match_groups_describe(make_broker) -> None:
    broker, port = start(make_broker)
    bootstrap = broker.bootstrap
    hour_ago = int(time.time() * 1000) - 3_600_000
    stamps = [hour_ago + i * 60_000 for i in range(10)]
    create_topic(bootstrap, "metered", 2)
    produce_at(bootstrap, "metered", stamps)  # partition 0
    for offset in (5, 7, 3):  # rewound: REWIND
        commit(bootstrap, "rewinder", "metered", offset)
    commit(bootstrap, "caught-up", "metered", 10)
    commit(bootstrap, "lagging", "metered", 4)

    before = time.time()
    metrics = scrape(port)
    answers = described(bootstrap, "rewinder", "caught-up", "lagging")
    after = time.time()

    for answer in answers:
        [row] = answer["partitions"]
        key = (answer["group"], "metered", "0")
        assert metrics["tidemark_consumergroup_committed_offset"][key] == row["current_offset"]
        assert metrics["tidemark_consumergroup_lag"][key] == row["lag"]
        assert {k[3]: v for k, v in metrics["tidemark_consumergroup_status"].items() if k[:3] == key} == {
            row["status"]: {"OK": 0, "REWIND": 5}[row["status"]]}
        # Both are now minus the same record's timestamp, now taken within [before, after].
        scraped = metrics["tidemark_consumergroup_lag_seconds"][key]
        if row["lag"] == 0:
            assert scraped == row["lag_seconds"] == 0
        else:
            stamp = stamps[row["current_offset"]] / 1000
            for seconds in (scraped, row["lag_seconds"]):
                assert before - stamp - 0.001 <= seconds <= after - stamp + 0.001
    assert [(a["group"], a["partitions"][0]["status"], a["partitions"][0]["lag"]) for a in answers] == [
        ("rewinder", "REWIND", 7), ("caught-up", "OK", 0), ("lagging", "OK", 6)]
    assert metrics["tidemark_consumergroup_series_dropped"][()] == 0

    # The next commit shows at the next scrape.
    commit(bootstrap, "lagging", "metered", 9)
    assert scrape(port)["tidemark_consumergroup_lag"][("lagging", "metered", "0")] == 1
    assert broker.stop() == 0


def test_series_are_bounded_and_can_be_turned_off(make_broker) -> None:
    broker, port = start(make_broker, **{"tidemark.lag.metrics.max.series": "2"})
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "bounded", 1)
    produce_at(bootstrap, "bounded", [int(time.time() * 1000)] * 3)
    for group in ("c", "a", "b"):
        commit(bootstrap, group, "bounded", 1)
    metrics = scrape(port)
    # The first label sets in (group, topic, partition) order are kept, the rest counted.
    assert sorted(metrics["tidemark_consumergroup_lag"]) == [("a", "bounded", "0"), ("b", "bounded", "0")]
    assert metrics["tidemark_consumergroup_series_dropped"][()] == 1
    assert broker.stop() == 0

    off, off_port = start(make_broker, **{"tidemark.lag.metrics.enable": "false"})
    create_topic(off.bootstrap, "unmetered", 1)
    commit(off.bootstrap, "g", "unmetered", 0)
    assert scrape(off_port) == {}
    assert off.stop() == 0
