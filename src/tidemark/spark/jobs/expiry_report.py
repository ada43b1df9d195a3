"""Which committed offsets expire at a given time, under KIP-211 and under the rules before it.

The offsets and groups are those a coordinator loading the log would hold (offsets_snapshot and
group_snapshot), and the KIP-211 decision is the broker's own (GroupCoordinatorShard.expire_offsets) at `at` with
offsets.retention.minutes = `retention_ms`:

- an offset with an explicit expire timestamp (value v1, a commit with a retention time)
  expires when at >= it, whatever its group does;
- otherwise it expires when at - base >= retention, where base is
  - the commit timestamp for a group without a protocol type: no group metadata record, or a
    standalone consumer's "simple" group (assign() and commit);
  - when the group became Empty (current_state_timestamp; the commit time if absent) for an
    Empty group with a protocol type;
  - the commit timestamp, for a Stable "consumer" group whose subscriptions are known, of a
    topic none of its members subscribes to any more;
  - nothing (never expires) otherwise: a live group keeps its offsets (KAFKA-4682).

Before KIP-211 (Kafka < 2.1) every offset expired at its expire timestamp, the commit time plus
the retention unless the commit set one, whatever the state of its group.

A group the coordinator knows in the Empty state (a group metadata record without members, or
no record at all) whose offsets all expire is removed with them (a group tombstone):
`groups_removed` lists those. Commits in flight, which the broker also skips, do not exist in a
log read from outside.

    tidemark spark expiry-report (--bootstrap-server HOST:PORT | --data-dir DIR) --at TIME
        [--retention-minutes 10080] [--output PATH --format parquet|csv]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.spark.jobs.offsets_snapshot import (
    EMPTY,
    STABLE,
    group_snapshot,
    offsets_snapshot,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_RETENTION_MINUTES = 10080  # offsets.retention.minutes
NO_GROUP = "none"  # group_state of offsets without group metadata
REPORT_COLUMNS = ("group", "topic", "partition", "committed_offset", "commit_timestamp", "expire_timestamp",
                  "group_state", "protocol_type", "retention_base", "expires_at", "expires",
                  "pre_kip211_expires_at", "pre_kip211_expires")
SUMMARY_COLUMNS = ("group", "group_state", "offsets", "expiring", "pre_kip211_expiring", "group_removed")


def expiry_report(records: DataFrame, at_ms: int, retention_ms: int) -> DataFrame:
    """REPORT_COLUMNS for every committed offset: when it expires under KIP-211 (`expires_at`,
    null for never) and whether it has at `at_ms` (`expires`), and the same before KIP-211."""
    from pyspark.sql import functions as F

    def plus_retention(column):
        return F.timestamp_millis(F.unix_millis(column) + F.lit(retention_ms))

    groups = group_snapshot(records).select(
        "group", F.col("state").alias("group_state"), "protocol_type", "current_state_timestamp",
        "subscribed_topics")
    offsets = offsets_snapshot(records).join(groups, "group", "left")
    has_protocol = F.coalesce(F.col("protocol_type"), F.lit("")) != ""
    unsubscribed = (F.col("subscribed_topics").isNotNull()
                    & ~F.coalesce(F.array_contains("subscribed_topics", F.col("topic")), F.lit(False)))
    base = (F.when(~has_protocol, F.col("commit_timestamp"))
            .when(F.col("group_state") == EMPTY, F.coalesce("current_state_timestamp", "commit_timestamp"))
            .when((F.col("group_state") == STABLE) & (F.col("protocol_type") == "consumer") & unsubscribed,
                  F.col("commit_timestamp")))
    at = F.timestamp_millis(F.lit(at_ms))
    return (offsets
            .withColumn("group_state", F.coalesce("group_state", F.lit(NO_GROUP)))
            .withColumn("retention_base", F.when(F.col("expire_timestamp").isNull(), base))
            # An explicit expire timestamp counts only where the offset may expire at all (Kafka).
            .withColumn("expires_at", F.when(base.isNotNull(),
                                             F.coalesce("expire_timestamp", plus_retention(base))))
            .withColumn("expires", F.coalesce(at >= F.col("expires_at"), F.lit(False)))
            .withColumn("pre_kip211_expires_at",
                        F.coalesce("expire_timestamp", plus_retention(F.col("commit_timestamp"))))
            .withColumn("pre_kip211_expires", F.coalesce(at >= F.col("pre_kip211_expires_at"), F.lit(False)))
            .select(*REPORT_COLUMNS).orderBy("group", "topic", "partition"))


def expiry_summary(records: DataFrame, report: DataFrame) -> DataFrame:
    """SUMMARY_COLUMNS per group with offsets or group metadata: how many offsets expire under
    each rule, and whether the group itself is removed (KIP-211)."""
    from pyspark.sql import functions as F

    per_group = report.groupBy("group").agg(
        F.count(F.lit(1)).alias("offsets"),
        F.sum(F.col("expires").cast("int")).alias("expiring"),
        F.sum(F.col("pre_kip211_expires").cast("int")).alias("pre_kip211_expiring"))
    states = group_snapshot(records).select("group", F.col("state").alias("group_state"))
    return (states.join(per_group, "group", "full")
            .withColumn("group_state", F.coalesce("group_state", F.lit(NO_GROUP)))
            .withColumn("offsets", F.coalesce("offsets", F.lit(0)))
            .withColumn("expiring", F.coalesce("expiring", F.lit(0)))
            .withColumn("pre_kip211_expiring", F.coalesce("pre_kip211_expiring", F.lit(0)))
            .withColumn("group_removed", F.col("group_state").isin(EMPTY, NO_GROUP)
                        & (F.col("expiring") == F.col("offsets")))
            .select(*SUMMARY_COLUMNS).orderBy("group"))


def groups_removed(summary: DataFrame) -> list[str]:
    return [row.group for row in summary.where("group_removed").select("group").collect()]


def main(spark: SparkSession, *, at_ms: int, retention_minutes: int = DEFAULT_RETENTION_MINUTES,
         bootstrap_servers: str | None = None, data_dir: str | None = None, output: str | None = None,
         fmt: str = "parquet", client_config: dict[str, str] | None = None) -> tuple[DataFrame, DataFrame]:
    """`tidemark spark expiry-report`: (report, per-group summary), the report written when asked."""
    from tidemark.spark.jobs.common import read_offsets_log, write

    records = read_offsets_log(spark, bootstrap_servers=bootstrap_servers, data_dir=data_dir,
                               client_config=client_config).cache()
    report = expiry_report(records, at_ms, retention_minutes * 60_000).cache()
    summary = expiry_summary(records, report).cache()
    if output:
        write(report, output, fmt)
    return report, summary
