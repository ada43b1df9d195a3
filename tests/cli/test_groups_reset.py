"""`tidemark groups reset-offsets` against a real broker, over the Kafka protocol (confluent-kafka).

Every test gets its own topic and group: a topic with known messages and timestamps, and a group that
committed known offsets and then closed (state Empty). A dry run must print the exact plan and change
nothing; --execute must commit it, and a consumer that then subscribes with the group must resume
exactly at the planned offset of every partition.
"""

from __future__ import annotations

import datetime
import itertools
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic
from tidemark.cli.groups import groups
from tidemark.cli.groups.reset_offsets import parse_datetime, parse_duration, parse_plan, plan_csv

UTC = datetime.timezone.utc
# Partition -> messages produced; message i of every partition has timestamp base + i * step.
COUNTS = {0: 10, 1: 6, 2: 3}
# What each group commits before it closes: partition 2 never gets an offset.
COMMITS = {0: 4, 1: 2}
BASE = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
STEP = datetime.timedelta(minutes=1)
PLAN_HEADER = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
WAIT_S = 30.0

_names = itertools.count()


def ms(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1000)


@pytest.fixture
def bootstrap(group_broker: BrokerProcess) -> str:
    return group_broker.bootstrap


def produce(bootstrap: str, topic: str, messages: list[tuple[int, int | None]]) -> None:
    """(partition, timestamp ms or None) pairs, each acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0})
    failures: list[KafkaError] = []
    for partition, timestamp in messages:
        producer.produce(topic, value=b"v", partition=partition, timestamp=timestamp or 0,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
    assert producer.flush(WAIT_S) == 0
    assert not failures, failures


def make_topic(bootstrap: str, base: datetime.datetime = BASE, step: datetime.timedelta = STEP) -> str:
    topic = f"reset-{next(_names)}"
    create_topic(bootstrap, topic, len(COUNTS))
    produce(bootstrap, topic, [(p, ms(base + i * step)) for p, count in COUNTS.items() for i in range(count)])
    return topic


def join(bootstrap: str, group: str, topic: str) -> Consumer:
    """A consumer that has joined `group` and owns every partition of `topic` (state Stable)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 0})
    consumer.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while len(consumer.assignment()) < len(COUNTS) and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert len(consumer.assignment()) == len(COUNTS), consumer.assignment()
    return consumer


def settled_group(bootstrap: str, topic: str) -> str:
    """A group that joined, committed COMMITS and left: Empty, with known committed offsets."""
    group = f"g-{topic}"
    consumer = join(bootstrap, group, topic)
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITS.items()], asynchronous=False)
    consumer.close()
    return group


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)
    result = futures[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic and tp.offset >= 0}


def first_offsets(bootstrap: str, group: str, topic: str, expected: set[int]) -> dict[int, int]:
    """Subscribe with `group` and note the first offset received per partition; waits (bounded) until
    every partition in `expected` delivered one, then a little longer for anything unexpected."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": False, "log_level": 0})
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + WAIT_S
    linger_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
            if linger_until is None and expected <= set(first):
                linger_until = time.monotonic() + 0.5
            if linger_until is not None and time.monotonic() >= linger_until:
                break
    finally:
        consumer.close()
    return first


def run(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(groups, [*args, "--bootstrap-server", bootstrap], catch_exceptions=False)


def plan_rows(group: str, topic: str, plan: dict[int, int]) -> list[list[str]]:
    return [PLAN_HEADER] + [[group, topic, str(p), str(o)] for p, o in sorted(plan.items())]


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def resumable(plan: dict[int, int]) -> dict[int, int]:
    """Where a consumer resuming at `plan` gets a first message: partitions with messages past the plan."""
    return {p: o for p, o in plan.items() if o < COUNTS[p]}


def resumes_at(plan: dict[int, int]) -> dict[int, int]:
    """Where the settled group resumes after executing `plan`: a partition the group never
    committed (and the plan left alone) at the earliest offset (auto.offset.reset), so the check
    waits for it too instead of racing it."""
    return resumable({**{p: 0 for p in COUNTS}, **COMMITS, **plan})


def check_dry_run_then_execute(bootstrap: str, group: str, topic: str, args: list[str],
                               plan: dict[int, int]) -> None:
    dry = run(bootstrap, "reset-offsets", group, *args)
    assert dry.exit_code == 0, dry.output
    assert table(dry.stdout) == plan_rows(group, topic, plan)
    assert dry.stderr.endswith("Dry run: nothing was committed; add --execute to commit these offsets.\n")
    assert committed(bootstrap, group, topic) == COMMITS

    executed = run(bootstrap, "reset-offsets", group, *args, "--execute")
    assert executed.exit_code == 0, executed.output
    assert table(executed.stdout) == plan_rows(group, topic, plan)
    assert "Dry run" not in executed.stderr
    assert committed(bootstrap, group, topic) == {**COMMITS, **plan}


SCENARIOS = {
    "to-earliest": (["--topic", "{topic}", "--to-earliest"], {0: 0, 1: 0, 2: 0}),
    # Partition 2 has no committed offset: --to-current takes its log end, as Kafka's tool does.
    "to-current": (["--topic", "{topic}", "--to-current"], {0: 4, 1: 2, 2: 3}),
    "to-offset": (["--topic", "{topic}:0,1", "--to-offset", "3"], {0: 3, 1: 3}),
    "shift-back": (["--all-topics", "--shift-by", "-2"], {0: 2, 1: 0}),
    "shift-forward": (["--all-topics", "--shift-by", "3"], {0: 7, 1: 5}),
    # 10:04:30 lies between messages 4 and 5; partition 2 has nothing that late, so its log end.
    "to-datetime-naive-utc": (["--topic", "{topic}", "--to-datetime", "2026-11-22T10:04:30.000"],
                              {0: 5, 1: 5, 2: 3}),
    # Exactly the timestamp of message 2 (10:02 UTC), given in +01:00.
    "to-datetime-with-offset": (["--topic", "{topic}", "--to-datetime", "2026-11-22T11:02:00.000+01:00"],
                                {0: 2, 1: 2, 2: 2}),
    "two-topic-args": (["--topic", "{topic}:1", "--topic", "{topic}:2", "--to-earliest"], {1: 0, 2: 0}),
    # 0 is a value like any other (it once counted as a missing option: 0 == False).
    "to-offset-zero": (["--topic", "{topic}", "--to-offset", "0"], {0: 0, 1: 0, 2: 0}),
    "shift-by-zero": (["--all-topics", "--shift-by", "0"], {0: 4, 1: 2}),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_dry_run_execute_and_resume(bootstrap: str, name: str) -> None:
    args, plan = SCENARIOS[name]
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    check_dry_run_then_execute(bootstrap, group, topic, [arg.format(topic=topic) for arg in args], plan)
    assert first_offsets(bootstrap, group, topic, set(resumes_at(plan))) == resumes_at(plan)


def test_to_latest_resumes_with_the_next_message(bootstrap: str) -> None:
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    check_dry_run_then_execute(bootstrap, group, topic, ["--topic", topic, "--to-latest"], dict(COUNTS))
    produce(bootstrap, topic, [(p, None) for p in COUNTS])
    assert first_offsets(bootstrap, group, topic, set(COUNTS)) == COUNTS


def test_by_duration(bootstrap: str) -> None:
    """Messages an hour apart, the newest an hour old: PT5H30M ago falls between messages 4 and 5."""
    now = datetime.datetime.now(UTC)
    topic = make_topic(bootstrap, base=now - datetime.timedelta(hours=10), step=datetime.timedelta(hours=1))
    group = settled_group(bootstrap, topic)
    wide = run(bootstrap, "reset-offsets", group, "--topic", topic, "--by-duration", "P1D")
    assert wide.exit_code == 0, wide.output
    assert table(wide.stdout) == plan_rows(group, topic, {0: 0, 1: 0, 2: 0})

    plan = {0: 5, 1: 5, 2: 3}
    check_dry_run_then_execute(bootstrap, group, topic, ["--topic", topic, "--by-duration", "PT5H30M"], plan)
    assert first_offsets(bootstrap, group, topic, {0, 1}) == {0: 5, 1: 5}


def test_out_of_range_targets_are_clamped(bootstrap: str) -> None:
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    beyond = run(bootstrap, "reset-offsets", group, "--topic", topic, "--to-offset", "100")
    assert beyond.exit_code == 0, beyond.output
    assert table(beyond.stdout) == plan_rows(group, topic, COUNTS)
    assert f"new offset (100) is higher than the latest offset of {topic}-0; using 10" in beyond.stderr

    plan = {0: 0, 1: 0}
    check_dry_run_then_execute(bootstrap, group, topic, ["--all-topics", "--shift-by", "-1000"], plan)
    assert first_offsets(bootstrap, group, topic, set(resumes_at(plan))) == resumes_at(plan) == {**plan, 2: 0}


def test_shift_by_needs_a_committed_offset(bootstrap: str) -> None:
    """Kafka's tool refuses to shift a partition the group never committed; so do we."""
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    result = run(bootstrap, "reset-offsets", group, "--topic", topic, "--shift-by", "1", "--execute")
    assert result.exit_code == 1
    assert result.stderr.strip() == (f"Error: Cannot shift offset for partition {topic}-2 since there is no "
                                     f"current committed offset")
    assert committed(bootstrap, group, topic) == COMMITS


def test_export_then_from_file_reproduces_the_plan(bootstrap: str, tmp_path: Path) -> None:
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    exported = run(bootstrap, "reset-offsets", group, "--all-topics", "--shift-by", "-1", "--export")
    assert exported.exit_code == 0, exported.output
    assert exported.stdout == f"{topic},0,3\n{topic},1,1\n"
    assert committed(bootstrap, group, topic) == COMMITS

    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(exported.stdout)
    plan = {0: 3, 1: 1}
    check_dry_run_then_execute(bootstrap, group, topic, ["--from-file", str(plan_file)], plan)
    assert first_offsets(bootstrap, group, topic, set(resumes_at(plan))) == resumes_at(plan) == {**plan, 2: 0}

    again = run(bootstrap, "reset-offsets", group, "--from-file", str(plan_file), "--export")
    assert again.exit_code == 0, again.output
    assert again.stdout == exported.stdout


def test_from_file_is_clamped_and_checked(bootstrap: str, tmp_path: Path) -> None:
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(f"{topic},0,50\n\n{topic},2,-5\n")
    result = run(bootstrap, "reset-offsets", group, "--from-file", str(plan_file))
    assert result.exit_code == 0, result.output
    assert table(result.stdout) == plan_rows(group, topic, {0: 10, 2: 0})

    plan_file.write_text(f"{topic},9,0\n")
    missing = run(bootstrap, "reset-offsets", group, "--from-file", str(plan_file))
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"Error: partition(s) {topic}-9 do not exist."


def test_refused_while_the_group_is_active(bootstrap: str) -> None:
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    consumer = join(bootstrap, group, topic)
    try:
        for mode in ([], ["--execute"], ["--export"]):
            result = run(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", *mode)
            assert result.exit_code == 1
            assert result.stderr.strip() == (f"Assignments can only be reset if the group '{group}' is inactive, "
                                             f"but the current state is Stable.")
            assert result.stdout == ""
        assert committed(bootstrap, group, topic) == COMMITS
    finally:
        consumer.close()
    after = run(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert after.exit_code == 0, after.output
    assert committed(bootstrap, group, topic) == {0: 0, 1: 0, 2: 0}


def test_unknown_topic_and_partition(bootstrap: str) -> None:
    topic = make_topic(bootstrap)
    group = settled_group(bootstrap, topic)
    unknown = run(bootstrap, "reset-offsets", group, "--topic", "no-such-topic", "--to-earliest")
    assert unknown.exit_code == 1
    assert unknown.stderr.strip() == "Error: topic 'no-such-topic' does not exist."
    partition = run(bootstrap, "reset-offsets", group, "--topic", f"{topic}:1,7", "--to-earliest")
    assert partition.exit_code == 1
    assert partition.stderr.strip() == f"Error: partition(s) {topic}-7 do not exist."


def test_a_group_without_offsets_can_be_given_some(bootstrap: str) -> None:
    """A group nobody has used yet (Dead to the coordinator) may be reset, like Kafka allows."""
    topic = make_topic(bootstrap)
    group = f"fresh-{topic}"
    result = run(bootstrap, "reset-offsets", group, "--topic", topic, "--to-offset", "1", "--execute")
    assert result.exit_code == 0, result.output
    assert committed(bootstrap, group, topic) == {0: 1, 1: 1, 2: 1}
    nothing = run(bootstrap, "reset-offsets", f"unused-{topic}", "--all-topics", "--to-earliest")
    assert nothing.exit_code == 1
    assert "has no committed offsets" in nothing.stderr


@pytest.mark.parametrize("args", [
    ["--topic", "t"],                                            # no scenario
    ["--topic", "t", "--to-earliest", "--to-latest"],            # two scenarios
    ["--to-earliest"],                                           # no scope
    ["--topic", "t", "--all-topics", "--to-earliest"],           # two scopes
    ["--topic", "t", "--to-earliest", "--dry-run", "--execute"],
    ["--topic", "t", "--by-duration", "5 minutes"],
    ["--topic", "t", "--to-datetime", "yesterday"],
    ["--topic", "t:x", "--to-earliest"],
])
def test_usage_errors_fail_before_any_connection(args: list[str]) -> None:
    # Port 9 (discard) on loopback: nothing listens, and nothing should be tried.
    result = CliRunner().invoke(groups, ["reset-offsets", "g", *args, "--bootstrap-server", "127.0.0.1:9"])
    assert result.exit_code == 2, result.output
    assert "cannot reach" not in result.output


def test_parse_duration() -> None:
    assert parse_duration("PT5H30M") == datetime.timedelta(hours=5, minutes=30)
    assert parse_duration("P1DT2H3M4.5S") == datetime.timedelta(days=1, hours=2, minutes=3, seconds=4.5)
    assert parse_duration("pt15m") == datetime.timedelta(minutes=15)
    assert parse_duration("-PT1H") == datetime.timedelta(hours=-1)
    for bad in ("P", "PT", "P1DT", "5M", "PT1Y", "P1W", ""):
        with pytest.raises(click.BadParameter):
            parse_duration(bad)


def test_parse_datetime() -> None:
    assert parse_datetime("2026-11-22T10:00:00.000") == ms(BASE)
    assert parse_datetime("2026-11-22T11:00:00.000+01:00") == ms(BASE)
    assert parse_datetime("2026-11-22T10:00:00Z") == ms(BASE)
    assert parse_datetime("2026-11-22T10:00:00.250") == ms(BASE) + 250
    with pytest.raises(click.BadParameter):
        parse_datetime("22/11/2026")


def test_plan_csv_round_trip() -> None:
    plan = {("b", 1): 7, ("a", 0): 3}
    assert plan_csv(plan) == "a,0,3\nb,1,7\n"
    assert parse_plan(plan_csv(plan), "g") == plan
    # The four-column form (GROUP,TOPIC,PARTITION,OFFSET) keeps only the rows of the group asked for.
    assert parse_plan("g,a,0,3\nother,a,0,9\n", "g") == {("a", 0): 3}
    with pytest.raises(click.ClickException, match="line 2"):
        parse_plan("a,0,3\na,zero,3\n", "g")

