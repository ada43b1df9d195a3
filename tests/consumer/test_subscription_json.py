"""The value of /consumers/[group]/ids/[consumer_id]: Kafka's JSON, and the docs' bare map."""

from __future__ import annotations

import json

from tidemark.consumer.registry import parse_subscription, subscription_json


def test_kafka_registration_json_round_trips_its_topic_counts() -> None:
    data = subscription_json({"a": 1, "b": 2})
    value = json.loads(data)
    assert (value["version"], value["pattern"], value["subscription"]) == (1, "static", {"a": 1, "b": 2})
    assert value["timestamp"].isdigit()
    assert parse_subscription(data) == {"a": 1, "b": 2}


def test_the_bare_topic_count_map_is_read_too() -> None:
    assert parse_subscription(b'{"t": 3}') == {"t": 3}
