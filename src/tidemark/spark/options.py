"""Options of the "tidemark" topic source and sink, named as in Spark's Kafka connector.

Parsed once on the driver into plain dataclasses (picklable, so executors get them as they are).
Offsets travel as Spark's Kafka connector writes them in its checkpoint: {"topic": {"0": 123}}.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# Spark's Kafka connector's markers inside startingOffsets / endingOffsets JSON.
EARLIEST = -2
LATEST = -1

# Kafka's consumer falls back to "latest" when a group has no committed offset.
DEFAULT_GROUP_FALLBACK = "latest"
DEFAULT_POLL_TIMEOUT_MS = 120_000
# The connector's defaults.
DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"
DEFAULT_FETCH_OFFSET_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 10
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000

Partition = tuple[str, int]
PartitionOffsets = dict[Partition, int]


class OptionError(ValueError):
    """An option is missing, unknown or malformed: raised on the driver before anything runs."""


def offsets_to_json(offsets: PartitionOffsets) -> dict[str, dict[str, int]]:
    """{(topic, p): offset} -> Spark's checkpoint form {"topic": {"p": offset}}, sorted."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """Spark's checkpoint form back to {(topic, p): offset}."""
    try:
        return {(topic, int(p)): int(offset) for topic, parts in data.items() for p, offset in parts.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise OptionError(f'offsets must look like {{"topic": {{"0": 23}}}}, got {data!r}') from exc


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of topics, pattern or assigned partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[Partition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            # Like Kafka's pattern subscription: internal topics only when named outright.
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: "earliest", "latest", "group", "specific" (per-partition
    offsets), "timestamp" (per-partition timestamps in `specific`) or "global_timestamp" (one
    `timestamp` for every partition). A timestamp resolves to the first offset stamped at or after
    it (ListOffsets by time); `unmatched` says what a partition without one gets: "error" (fail the
    query) or "latest"."""

    kind: str
    specific: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None
    unmatched: str = "latest"


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    group_id: str | None
    group_fallback: str
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_ms: int
    client_config: dict[str, str]
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    include_headers: bool = False
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX
    fetch_offset_retries: int = DEFAULT_FETCH_OFFSET_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    max_records_per_partition: int | None = None

    def consumer_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.client_config}


SOURCE_OPTIONS = ("bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets",
                  "endingOffsets", "group.id", "maxOffsetsPerTrigger", "failOnDataLoss",
                  "kafkaConsumer.pollTimeoutMs", "startingTimestamp", "startingOffsetsByTimestamp",
                  "startingOffsetsByTimestampStrategy", "endingTimestamp", "endingOffsetsByTimestamp",
                  "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions", "includeHeaders", "groupIdPrefix",
                  "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "maxRecordsPerPartition")
# Spark's DataFrameWriter / DataStreamWriter hand their own settings to the sink among the options.
SINK_OPTIONS = ("bootstrap.servers", "topic", "checkpointLocation", "path")


def check_known(options: Mapping[str, str], known: tuple[str, ...]) -> None:
    """A misspelled option (startingOffset, maxOffsetPerTrigger) would otherwise be ignored and the
    query read everything: name it, and the closest valid one. Spark matches names case-insensitively."""
    by_lower = {name.lower(): name for name in known}
    for key in options:
        lower = key.lower()
        if lower in by_lower or lower.startswith("kafka."):
            continue
        close = difflib.get_close_matches(lower, by_lower, n=1, cutoff=0.6)
        hint = f'; did you mean "{by_lower[close[0]]}"?' if close else ""
        raise OptionError(f'unknown option "{key}"{hint} (client settings go as "kafka.<name>")')


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    """kafka.* options go to the client unchanged, prefix stripped (as in Spark's connector)."""
    return {key[len("kafka."):]: value for key, value in options.items() if key.lower().startswith("kafka.")}


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name) or options.get(f"kafka.{name}")
    if not value:
        raise OptionError(f'option "kafka.{name}" or "{name}" is required')
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise OptionError(f'option "{name}" must be true or false, got {value!r}')
    return value.lower() == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(f'option "{name}" must be a positive integer, got {value!r}')
    return number


def _non_negative_int(options: Mapping[str, str], name: str, default: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise OptionError(f'option "{name}" must be a non-negative integer, got {value!r}')
    return number


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, value: str) -> int:
    """Spark's time strings: "15m", "30s", "500ms", "1h"; a bare number is milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS_MS):
        raise OptionError(f'option "{name}" must be a duration like 15m, 30s or 500ms, got {value!r}')
    return int(match.group(1)) * _DURATION_UNITS_MS.get(match.group(2) or "ms", 1)


def _timestamp_spec(options: Mapping[str, str], single: str, per_partition: str, unmatched: str
                    ) -> OffsetSpec | None:
    """startingTimestamp / endingTimestamp (every partition) before the ...OffsetsByTimestamp JSON."""
    if options.get(single) is not None:
        try:
            return OffsetSpec("global_timestamp", timestamp=int(options[single]), unmatched=unmatched)
        except ValueError:
            raise OptionError(f'option "{single}" must be epoch milliseconds, got {options[single]!r}') from None
    if options.get(per_partition) is not None:
        try:
            stamps = offsets_from_json(json.loads(options[per_partition]))
        except ValueError as exc:
            raise OptionError(f'option "{per_partition}" must look like {{"topic": {{"0": 1700000000000}}}}: '
                              f'{exc}') from exc
        return OffsetSpec("timestamp", stamps, unmatched=unmatched)
    return None


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if options.get(name)]
    if len(given) != 1:
        raise OptionError('set exactly one of the options "subscribe", "subscribePattern" or "assign"')
    name = given[0]
    value = options[name]
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError('option "subscribe" names no topic')
        return Subscription(topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f'option "subscribePattern" is not a valid regular expression: {exc}') from exc
        return Subscription(pattern=value)
    try:
        assigned = json.loads(value)
        partitions = tuple(sorted((topic, int(p)) for topic, parts in assigned.items() for p in parts))
    except (ValueError, AttributeError, TypeError) as exc:
        raise OptionError(f'option "assign" must look like {{"topic": [0, 1]}}, got {value!r}') from exc
    if not partitions:
        raise OptionError('option "assign" names no partition')
    return Subscription(topics=tuple(sorted({t for t, _ in partitions})), assigned=partitions)


def parse_offset_spec(options: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> OffsetSpec:
    value = (options.get(name) or default).strip()
    if value.lower() in allowed:
        return OffsetSpec(value.lower())
    if value.startswith("{"):
        try:
            return OffsetSpec("specific", offsets_from_json(json.loads(value)))
        except ValueError as exc:
            raise OptionError(f'option "{name}" is not valid JSON offsets: {exc}') from exc
    choices = " | ".join(allowed)
    raise OptionError(f'option "{name}" must be {choices} or JSON like {{"topic": {{"0": 23}}}}, got {value!r}')


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    check_known(options, SOURCE_OPTIONS)
    group_id = options.get("group.id") or options.get("kafka.group.id")
    strategy = (options.get("startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f'option "startingOffsetsByTimestampStrategy" must be error or latest, got {strategy!r}')
    # The connector's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets.
    starting = _timestamp_spec(options, "startingTimestamp", "startingOffsetsByTimestamp", strategy) or (
        parse_offset_spec(options, "startingOffsets", "latest" if streaming else "earliest",
                          ("earliest", "latest", "group")))
    if not streaming and (starting.kind == "latest" or LATEST in starting.specific.values()):
        # As Spark's connector: a batch would start where it ends, at the latest offset, and read nothing.
        raise OptionError('startingOffsets "latest" (or -1) is for streaming queries only: a batch query would '
                          'read nothing; use "earliest", offsets or a timestamp')
    if starting.kind == "group" and not group_id:
        raise OptionError('startingOffsets "group" needs the option "group.id"')
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if streaming and options.get(name):
            raise OptionError(f'option "{name}" is for batch queries only')
    # An ending timestamp that matches no offset ends at the latest offset, as in the connector.
    ending = _timestamp_spec(options, "endingTimestamp", "endingOffsetsByTimestamp", "latest") or (
        parse_offset_spec(options, "endingOffsets", "latest", ("latest",)))
    if any(offset == EARLIEST for offset in ending.specific.values()):
        raise OptionError('endingOffsets cannot use -2 (earliest)')
    fallback = _client_config(options).get("auto.offset.reset", DEFAULT_GROUP_FALLBACK).lower()
    if fallback not in ("earliest", "latest"):
        raise OptionError(f'kafka.auto.offset.reset must be earliest or latest, got {fallback!r}')
    return SourceOptions(
        bootstrap_servers=_required(options, "bootstrap.servers"),
        subscription=parse_subscription(options),
        starting=starting,
        ending=ending,
        group_id=group_id,
        group_fallback=fallback,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        poll_timeout_ms=_positive_int(options, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        client_config={k: v for k, v in _client_config(options).items()
                       if k not in ("bootstrap.servers", "group.id", "auto.offset.reset")},
        min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=parse_duration_ms("maxTriggerDelay", options["maxTriggerDelay"])
        if options.get("maxTriggerDelay") is not None else DEFAULT_MAX_TRIGGER_DELAY_MS,
        min_partitions=_positive_int(options, "minPartitions"),
        include_headers=_boolean(options, "includeHeaders", False),
        group_id_prefix=options.get("groupIdPrefix") or DEFAULT_GROUP_ID_PREFIX,
        fetch_offset_retries=_non_negative_int(options, "fetchOffset.numRetries", DEFAULT_FETCH_OFFSET_RETRIES),
        fetch_offset_retry_interval_ms=_non_negative_int(options, "fetchOffset.retryIntervalMs",
                                                         DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS),
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition"),
    )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    client_config: dict[str, str]


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    check_known(options, SINK_OPTIONS)
    return SinkOptions(
        bootstrap_servers=_required(options, "bootstrap.servers"),
        topic=options.get("topic"),
        client_config={k: v for k, v in _client_config(options).items() if k != "bootstrap.servers"},
    )
