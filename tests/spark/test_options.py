"""Option parsing and rate limiting of the "tidemark" source: pure functions, no Spark needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.datasource import CaseInsensitiveDict

from tidemark.spark.options import (
    OptionError,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from tidemark.spark.source import limit_offsets

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}


def parse(streaming=True, **options):
    return parse_source_options(CaseInsensitiveDict({**BOOTSTRAP, **options}), streaming=streaming)


def test_defaults_follow_sparks_kafka_connector():
    streaming = parse(subscribe="a, b")
    assert streaming.subscription.topics == ("a", "b")
    assert streaming.starting.kind == "latest"
    assert streaming.fail_on_data_loss is True
    assert streaming.max_offsets_per_trigger is None
    assert parse(streaming=False, subscribe="a").starting.kind == "earliest"


def test_kafka_options_pass_through_and_names_are_case_insensitive():
    options = parse(subscribe="a", maxoffsetspertrigger="10", **{"kafka.fetch.max.bytes": "1024",
                                                                  "kafka.auto.offset.reset": "earliest"})
    assert options.max_offsets_per_trigger == 10
    assert options.consumer_config() == {"bootstrap.servers": "127.0.0.1:9092", "fetch.max.bytes": "1024"}
    assert options.group_fallback == "earliest"


def test_assign_and_specific_offsets():
    options = parse(streaming=False, assign='{"t": [1, 0]}', startingOffsets='{"t": {"0": 5, "1": -2}}',
                    endingOffsets='{"t": {"0": 9, "1": -1}}')
    assert options.subscription.assigned == (("t", 0), ("t", 1))
    assert options.starting.specific == {("t", 0): 5, ("t", 1): -2}
    assert options.ending.specific == {("t", 0): 9, ("t", 1): -1}


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "a", "subscribePattern": "a.*"}, "exactly one of"),
    ({}, "exactly one of"),
    ({"subscribePattern": "("}, "not a valid regular expression"),
    ({"assign": "[1]"}, '"assign" must look like'),
    ({"subscribe": "a", "startingOffsets": "group"}, 'needs the option "group.id"'),
    ({"subscribe": "a", "startingOffsets": "newest"}, "earliest | latest | group"),
    ({"subscribe": "a", "startingOffsets": '{"a": 5}'}, "offsets must look like"),
    ({"subscribe": "a", "endingOffsets": "latest"}, "for batch queries only"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive integer"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "none"}, "earliest or latest"),
])
def test_bad_options_are_refused_with_the_option_named(options, message):
    with pytest.raises(OptionError, match=message):
        parse(**options)


def test_bootstrap_servers_is_required():
    with pytest.raises(OptionError, match='"bootstrap.servers" is required'):
        parse_source_options(CaseInsensitiveDict({"subscribe": "a"}), streaming=True)
    with pytest.raises(OptionError, match='"bootstrap.servers" is required'):
        parse_sink_options(CaseInsensitiveDict({"topic": "a"}))


def test_offsets_json_is_sparks_checkpoint_form():
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 4}
    assert offsets_to_json(offsets) == {"a": {"2": 4, "10": 3}, "b": {"1": 7}}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets


def test_limit_shares_out_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    assert limit_offsets(start, latest, 80) == {("t", 0): 60, ("t", 1): 120, ("t", 2): 50}
    assert limit_offsets(start, latest, 1000) == latest


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1),
       st.integers(1, 3000))
def test_limit_takes_exactly_the_smaller_of_limit_and_backlog(ranges, max_rows):
    start = {("t", p): lo for p, (lo, _) in ranges.items()}
    latest = {("t", p): lo + extra for p, (lo, extra) in ranges.items()}
    end = limit_offsets(start, latest, max_rows)
    backlog = sum(latest[p] - start[p] for p in latest)
    assert sum(end[p] - start[p] for p in end) == min(max_rows, backlog)
    assert all(start[p] <= end[p] <= latest[p] for p in end)


@pytest.mark.parametrize("typo, meant", [
    ("startingOffset", "startingOffsets"),
    ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
    ("failOnDatLoss", "failOnDataLoss"),
    ("subscribePatern", "subscribePattern"),
])
def test_a_misspelled_option_is_an_error_naming_the_closest(typo, meant):
    """Ignored, a misspelled option made the query read everything."""
    with pytest.raises(OptionError) as raised:
        parse(subscribe="a", **{typo: "5"})
    assert str(raised.value) == (f'unknown option "{typo.lower()}"; did you mean "{meant}"? '
                                 f'(client settings go as "kafka.<name>")')


def test_an_unknown_option_without_a_close_one_and_on_the_sink():
    with pytest.raises(OptionError, match='^unknown option "linger.ms" \\(client'):
        parse(subscribe="a", **{"linger.ms": "5"})
    with pytest.raises(OptionError, match='unknown option "topics"; did you mean "topic"'):
        parse_sink_options(CaseInsensitiveDict({**BOOTSTRAP, "topics": "a"}))
    sink = parse_sink_options(CaseInsensitiveDict({**BOOTSTRAP, "topic": "a", "checkpointLocation": "/c",
                                                   "kafka.linger.ms": "5"}))
    assert sink.client_config == {"linger.ms": "5"}
