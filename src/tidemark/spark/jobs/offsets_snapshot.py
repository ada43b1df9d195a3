"""The offsets table as the coordinator would load it from the offsets log.

Loading replays each offsets partition from its start: the last record of a key wins and a
tombstone removes the key, as Kafka's coordinator loads it. `offsets_snapshot` does the same over the rows of the
"tidemark-offsets" source: one row per (group, topic, partition) still committed, which is what
OffsetFetch answers for that group. `group_snapshot` does it for the group metadata records.
Records that failed to decode ("unknown" rows) take no part, as KIP-848 records do not. A
transactional commit (TxnOffsetCommit, read from files) counts only if the first marker of its
producer after it in that offsets partition is a COMMIT, as loading replays it; it then takes
its place by its own log offset (the newest record wins, as in Kafka).

    tidemark spark offsets-snapshot (--bootstrap-server HOST:PORT | --data-dir DIR) [--output PATH]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.spark.offsets_source import GROUP_METADATA, OFFSET_COMMIT, TRANSACTION_MARKER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OFFSET_KEY = ("group", "topic", "partition")
SNAPSHOT_COLUMNS = ("group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
                    "commit_timestamp", "expire_timestamp", "offsets_partition", "log_offset")
GROUP_COLUMNS = ("group", "state", "protocol_type", "generation", "protocol", "leader", "current_state_timestamp",
                 "members", "subscribed_topics", "offsets_partition", "log_offset")

# The state a loaded group comes back in: Stable with members, Empty without, as in Kafka.
STABLE = "Stable"
EMPTY = "Empty"


def latest_per_key(records: DataFrame, key: tuple[str, ...]) -> DataFrame:
    """The last record of each key, by offsets partition and log offset (tombstones included)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    last_first = Window.partitionBy(*key).orderBy(F.col("offsets_partition").desc(), F.col("log_offset").desc())
    return (records.withColumn("_rank", F.row_number().over(last_first))
            .where(F.col("_rank") == 1).drop("_rank"))


def decided_commits(records: DataFrame) -> DataFrame:
    """The offset commit rows that count: every non-transactional one, and the transactional ones
    whose transaction committed (the first marker of their producer after them is a COMMIT)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    commits = records.where(F.col("record_type") == OFFSET_COMMIT)
    markers = (records.where(F.col("record_type") == TRANSACTION_MARKER)
               .select("offsets_partition", "producer_id", F.col("log_offset").alias("_marker"),
                       F.col("transaction_result").alias("_result")))
    first_marker = Window.partitionBy("offsets_partition", "log_offset").orderBy("_marker")
    committed = (commits.where(F.col("producer_id").isNotNull())
                 .join(markers, ["offsets_partition", "producer_id"])
                 .where(F.col("_marker") > F.col("log_offset"))
                 .withColumn("_rank", F.row_number().over(first_marker))
                 .where((F.col("_rank") == 1) & (F.col("_result") == "COMMIT"))
                 .select(*commits.columns))
    return commits.where(F.col("producer_id").isNull()).unionByName(committed)


def offsets_snapshot(records: DataFrame) -> DataFrame:
    """One row per committed offset still in force: SNAPSHOT_COLUMNS, ordered by key."""
    from pyspark.sql import functions as F

    commits = decided_commits(records)
    return (latest_per_key(commits, OFFSET_KEY).where(~F.col("tombstone"))
            .select(*SNAPSHOT_COLUMNS).orderBy(*OFFSET_KEY))


def group_snapshot(records: DataFrame) -> DataFrame:
    """One row per group with group metadata in force: GROUP_COLUMNS, with the state a loaded
    group takes (Stable with members, Empty without)."""
    from pyspark.sql import functions as F

    groups = records.where(F.col("record_type") == GROUP_METADATA)
    return (latest_per_key(groups, ("group",)).where(~F.col("tombstone"))
            .withColumn("state", F.when(F.size("members") > 0, F.lit(STABLE)).otherwise(F.lit(EMPTY)))
            .select(*GROUP_COLUMNS).orderBy("group"))


def main(spark: SparkSession, *, bootstrap_servers: str | None = None, data_dir: str | None = None,
         output: str | None = None, fmt: str = "parquet", client_config: dict[str, str] | None = None) -> DataFrame:
    """`tidemark spark offsets-snapshot`: read the log, take the snapshot, write it if asked."""
    from tidemark.spark.jobs.common import read_offsets_log, write

    snapshot = offsets_snapshot(read_offsets_log(spark, bootstrap_servers=bootstrap_servers, data_dir=data_dir,
                                                 client_config=client_config))
    if output:
        snapshot = snapshot.cache()
        write(snapshot, output, fmt)
    return snapshot
