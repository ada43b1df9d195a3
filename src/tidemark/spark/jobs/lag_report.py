"""Consumer lag from the offsets log: committed offset against log-end offset.

`lag_report` joins the offsets snapshot with the log-end offset of every committed partition:
lag = log_end_offset - committed_offset, as kafka-consumer-groups computes it (null when the
partition's end is unknown, e.g. its topic was deleted). `lag_per_group` sums it per group.
Log-end offsets come from the cluster (the high watermark, through confluent-kafka on the
driver) or, offline, from the segment files of the data directory.

    tidemark spark lag-report (--bootstrap-server HOST:PORT | --data-dir DIR)
        [--output PATH --format parquet|csv] [--chart lag.png]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPORT_COLUMNS = ("group", "topic", "partition", "committed_offset", "log_end_offset", "lag")
PER_GROUP_COLUMNS = ("group", "partitions", "total_lag")


def log_end_schema():
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    return StructType([StructField("topic", StringType(), False), StructField("partition", IntegerType(), False),
                       StructField("log_end_offset", LongType())])


def lag_report(snapshot: DataFrame, log_end: DataFrame) -> DataFrame:
    """REPORT_COLUMNS per committed offset of the snapshot; `log_end` has (topic, partition,
    log_end_offset)."""
    from pyspark.sql import functions as F

    return (snapshot.join(log_end, ["topic", "partition"], "left")
            .withColumn("lag", F.col("log_end_offset") - F.col("committed_offset"))
            .select(*REPORT_COLUMNS).orderBy("group", "topic", "partition"))


def lag_per_group(report: DataFrame) -> DataFrame:
    """PER_GROUP_COLUMNS: committed partitions and their total lag (unknown lags left out)."""
    from pyspark.sql import functions as F

    return (report.groupBy("group")
            .agg(F.count(F.lit(1)).alias("partitions"), F.coalesce(F.sum("lag"), F.lit(0)).alias("total_lag"))
            .select(*PER_GROUP_COLUMNS).orderBy("group"))


def log_end_offsets_from_cluster(bootstrap_servers: str, partitions: Iterable[tuple[str, int]],
                                 config: dict[str, Any] | None = None, timeout_s: float = 10.0
                                 ) -> list[tuple[str, int, int | None]]:
    """(topic, partition, high watermark) of each partition; None for one the cluster does not have."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "tidemark-lag-report",
                         "enable.auto.commit": False, **(config or {})})
    try:
        existing: dict[str, set[int]] = {}
        result = []
        for topic, partition in partitions:
            if topic not in existing:
                found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
                ok = found is not None and found.error is None
                existing[topic] = set(found.partitions) if ok else set()
            end = None
            if partition in existing[topic]:
                try:
                    _low, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s,
                                                               cached=False)
                except KafkaException:
                    end = None
            result.append((topic, partition, end))
        return result
    finally:
        consumer.close()


def log_end_offsets_from_data_dir(data_dir: str | Path, partitions: Iterable[tuple[str, int]]
                                  ) -> list[tuple[str, int, int | None]]:
    """(topic, partition, log-end offset) from the segment files; None for a missing partition."""
    from tidemark.log.offline import log_end_offset

    result = []
    for topic, partition in partitions:
        directory = Path(data_dir) / f"{topic}-{partition}"
        result.append((topic, partition, log_end_offset(directory) if directory.is_dir() else None))
    return result


def draw_chart(per_group: Iterable[tuple[str, int]], path: str | Path, title: str = "consumer lag per group") -> None:
    """A PNG bar chart of total lag per group (matplotlib, Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = list(per_group)
    groups = [group for group, _ in rows]
    lags = [lag for _, lag in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.5))
    try:
        bars = ax.bar(range(len(rows)), lags, color="#3b7dd8")
        ax.set_xticks(range(len(rows)), groups, rotation=30 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center")
        ax.bar_label(bars, labels=[f"{lag:,}" for lag in lags], padding=2, fontsize=8)
        ax.set_ylabel("total lag (messages)")
        ax.set_title(title)
        ax.set_ylim(bottom=0, top=max([1, *lags]) * 1.15)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


def main(spark: SparkSession, *, bootstrap_servers: str | None = None, data_dir: str | None = None,
         output: str | None = None, fmt: str = "parquet", chart: str | None = None,
         client_config: dict[str, Any] | None = None) -> tuple[DataFrame, DataFrame]:
    """`tidemark spark lag-report`: (report, per group), written and charted when asked."""
    from tidemark.spark.jobs.common import read_offsets_log, write
    from tidemark.spark.jobs.offsets_snapshot import offsets_snapshot

    snapshot = offsets_snapshot(read_offsets_log(spark, bootstrap_servers=bootstrap_servers, data_dir=data_dir)).cache()
    partitions = [(row.topic, row.partition) for row in snapshot.select("topic", "partition").distinct().collect()]
    if bootstrap_servers is not None:
        ends = log_end_offsets_from_cluster(bootstrap_servers, partitions, client_config)
    else:
        ends = log_end_offsets_from_data_dir(data_dir, partitions)
    report = lag_report(snapshot, spark.createDataFrame(ends, log_end_schema())).cache()
    per_group = lag_per_group(report).cache()
    if output:
        write(report, output, fmt)
    if chart:
        draw_chart([(row.group, row.total_lag) for row in per_group.collect()], chart)
    return report, per_group
