"""Consumer lag from the offsets log: committed offset against log-end offset, lag in time and
Burrow's status.

`lag_report` joins the offsets snapshot with the log-end offset of every committed partition:
lag = log_end_offset - committed_offset, as kafka-consumer-groups computes it (null when the
partition's end is unknown, e.g. its topic was deleted), and with each partition's lag_seconds
and status (lag_history: from the commit history in the offsets log). `lag_per_group` sums the
lag per group and takes its worst status. Log-end offsets come from the cluster (the high
watermark, through confluent-kafka on the driver) or, offline, from the segment files of the
data directory. The chart shows the total lag now of the groups with most lag (named bars, the
rest as one) and, once they have commits to show, their lag over time (after each commit).

    tidemark spark lag-report (--bootstrap-server HOST:PORT | --data-dir DIR)
        [--output PATH --format parquet|csv] [--chart lag.png]
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark import lag as lag_math
from tidemark.hold import hold

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPORT_COLUMNS = ("group", "topic", "partition", "committed_offset", "log_end_offset", "lag", "lag_seconds", "status")
PER_GROUP_COLUMNS = ("group", "partitions", "total_lag", "status")
# One size for any number of groups: the top CHART_TOP_GROUPS by lag get a bar each, the rest one.
CHART_WIDTH_IN = 12
CHART_BARS_HEIGHT_IN = 6.5
CHART_TIME_HEIGHT_IN = 4.5
CHART_DPI = 100
CHART_TOP_GROUPS = 20
CHART_TOP_SERIES = 10
CHART_NAME_CHARS = 48
CHART_MIN_SLOTS = 8


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


def details_schema():
    from pyspark.sql.types import DoubleType, IntegerType, StringType, StructField, StructType

    return StructType([StructField("group", StringType(), False), StructField("topic", StringType(), False),
                       StructField("partition", IntegerType(), False), StructField("lag_seconds", DoubleType()),
                       StructField("status", StringType())])


def lag_report(snapshot: DataFrame, log_end: DataFrame, details: DataFrame | None = None) -> DataFrame:
    """REPORT_COLUMNS per committed offset of the snapshot; `log_end` has (topic, partition,
    log_end_offset), `details` (group, topic, partition, lag_seconds, status)."""
    from pyspark.sql import functions as F

    report = (snapshot.join(log_end, ["topic", "partition"], "left")
              .withColumn("lag", F.col("log_end_offset") - F.col("committed_offset")))
    if details is None:
        report = report.withColumn("lag_seconds", F.lit(None).cast("double")).withColumn("status", F.lit(None).cast("string"))
    else:
        report = report.join(details, ["group", "topic", "partition"], "left")
    return report.select(*REPORT_COLUMNS).orderBy("group", "topic", "partition")


def lag_per_group(report: DataFrame) -> DataFrame:
    """PER_GROUP_COLUMNS: committed partitions, their total lag (unknown lags left out) and the
    worst partition's status (REWIND, STOP and STALL as ERR, as Burrow reports a group)."""
    from pyspark.sql import functions as F

    levels = [lag_math.OK, lag_math.WARN, lag_math.ERR]
    rank = F.create_map(*[F.lit(x) for status in (lag_math.OK, lag_math.WARN, lag_math.ERR, lag_math.STOP,
                                                  lag_math.STALL, lag_math.REWIND)
                          for x in (status, levels.index(lag_math.group_status([status])))])
    return (report.groupBy("group")
            .agg(F.count(F.lit(1)).alias("partitions"), F.coalesce(F.sum("lag"), F.lit(0)).alias("total_lag"),
                 F.max(rank[F.col("status")]).alias("_worst"))
            .withColumn("status", F.element_at(F.array(*map(F.lit, levels)), F.col("_worst") + 1))
            .select(*PER_GROUP_COLUMNS).orderBy("group"))


def log_end_offsets_from_cluster(bootstrap_servers: str, partitions: Iterable[tuple[str, int]],
                                 config: dict[str, Any] | None = None, timeout_s: float = 10.0
                                 ) -> list[tuple[str, int, int | None]]:
    """(topic, partition, high watermark) of each partition; None for one the cluster does not have."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from tidemark.spark.clients import quiet

    consumer = Consumer(quiet({"bootstrap.servers": bootstrap_servers, "group.id": "tidemark-lag-report",
                               "enable.auto.commit": False, **(config or {})}))
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
    from tidemark.log.direct_read import log_end_offset

    result = []
    for topic, partition in partitions:
        directory = Path(data_dir) / f"{topic}-{partition}"
        result.append((topic, partition, log_end_offset(directory) if directory.is_dir() else None))
    return result


def chart_groups(per_group: Iterable[tuple[str, int]], top: int = CHART_TOP_GROUPS
                 ) -> tuple[list[tuple[str, int]], tuple[int, int] | None]:
    """The `top` groups by lag (most first, then by name) and (how many others, their total lag),
    None when there are no others."""
    rows = sorted(per_group, key=lambda row: (-(row[1] or 0), row[0]))
    shown, rest = rows[:top], rows[top:]
    return shown, ((len(rest), sum(lag or 0 for _, lag in rest)) if rest else None)


def _compact(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


def _short(name: str, limit: int = CHART_NAME_CHARS) -> str:
    return name if len(name) <= limit else name[: limit // 2 - 1] + "…" + name[-(limit - limit // 2):]


def draw_chart(per_group: Iterable[tuple[str, int]], path: str | Path, title: str = "consumer lag per group",
               over_time: dict[str, list[tuple[int, int]]] | None = None) -> None:
    """chart_figure as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = chart_figure(per_group, title, over_time)
    try:
        fig.savefig(path, format="png", dpi=CHART_DPI)
    finally:
        plt.close(fig)


def chart_figure(per_group: Iterable[tuple[str, int]], title: str = "consumer lag per group",
                 over_time: dict[str, list[tuple[int, int]]] | None = None):
    """A figure of one size whatever the number of groups (matplotlib, Agg backend: no display
    needed). Top: a bar per group, named, for the CHART_TOP_GROUPS groups with most lag and one
    for all the others. Below, when `over_time` has a group with two points or more: the total
    lag over time ((epoch ms, lag) points, a step after each commit) of the CHART_TOP_SERIES of
    them with most lag now."""
    import datetime

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    rows = list(per_group)
    shown, others = chart_groups(rows)
    series = {group: points for group, points in (over_time or {}).items() if len(points) >= 2}
    by_lag = [group for group, _ in chart_groups(rows, len(rows))[0] if group in series]
    by_lag += sorted(set(series) - set(by_lag))
    lines = by_lag[:CHART_TOP_SERIES]
    rest = by_lag[CHART_TOP_SERIES:]
    panels = 2 if series else 1
    heights = [CHART_BARS_HEIGHT_IN, CHART_TIME_HEIGHT_IN][:panels]
    fig, axes = plt.subplots(panels, 1, figsize=(CHART_WIDTH_IN, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    compact = FuncFormatter(lambda value, _pos: _compact(value))
    ax = axes[0][0]
    labels = [_short(group) for group, _ in shown]
    lags = [lag or 0 for _, lag in shown]
    colors = ["#3b7dd8"] * len(shown)
    if others is not None:
        labels.append(f"{others[0]:,} other groups")
        lags.append(others[1])
        colors.append("#9a9a9a")
    positions = list(range(len(labels)))
    # The named groups set the scale: the others' bar (often the largest) is cut at its edge,
    # hatched, and labelled with its true total rather than flattening every other bar.
    scale = max([1, *(lags[: len(shown)] if shown else lags)]) * 1.25
    drawn = [min(lag, scale) for lag in lags]
    bars = ax.barh(positions, drawn, color=colors, height=0.7)
    if others is not None and others[1] > scale:
        bars[-1].set_hatch("//")
    ax.set_yticks(positions, labels, fontsize=9)
    ax.set_ylim(max(len(labels), CHART_MIN_SLOTS) - 0.5, -0.5)  # most lag at the top; bars of one thickness
    ax.bar_label(bars, labels=[f"{lag:,}" for lag in lags], padding=3, fontsize=8)
    ax.set_xlim(left=0, right=scale * 1.12)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    ax.xaxis.set_major_formatter(compact)
    ax.set_xlabel("total lag (messages)")
    total = len(rows)
    ax.set_title(title if others is None else f"{title}: the {len(shown)} of {total:,} groups with most lag",
                 loc="left")
    if not rows:
        ax.text(0.5, 0.5, "no committed offsets", transform=ax.transAxes, ha="center", va="center")
    if series:
        ax = axes[1][0]
        for group, points in [(group, series[group]) for group in lines]:
            times = [datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC) for ts, _ in points]
            ax.step(times, [value for _, value in points], where="post", label=_short(group, 30))
        ax.set_ylabel("total lag (messages)")
        ax.set_title("lag over time (after each commit)" if not rest else
                     f"lag over time (after each commit): the {len(lines)} of {len(series):,} groups with most lag "
                     f"now", loc="left")
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(compact)
        locator = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.set_xlabel("time (UTC)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def main(spark: SparkSession, *, bootstrap_servers: str | None = None, data_dir: str | None = None,
         output: str | None = None, fmt: str = "parquet", chart: str | None = None,
         client_config: dict[str, Any] | None = None, now_ms: int | None = None) -> tuple[DataFrame, DataFrame]:
    """`tidemark spark lag-report`: (report, per group), written and charted when asked; time lags
    and statuses as of `now_ms` (default: now)."""
    from tidemark.spark.jobs import lag_history
    from tidemark.spark.jobs.common import read_offsets_log, write
    from tidemark.spark.jobs.offsets_snapshot import offsets_snapshot

    records = read_offsets_log(spark, bootstrap_servers=bootstrap_servers, data_dir=data_dir,
                               client_config=client_config).cache()
    snapshot = offsets_snapshot(records).cache()
    committed = {(r.group, r.topic, r.partition): r.committed_offset
                 for r in snapshot.select("group", "topic", "partition", "committed_offset").collect()}
    hold("lag_report")  # a test's Ctrl-C lands here, with Spark running
    partitions = sorted({key[1:] for key in committed})
    if bootstrap_servers is not None:
        ends = log_end_offsets_from_cluster(bootstrap_servers, partitions, client_config)
        lookups: lag_history.Lookups = lag_history.ClusterLookups(bootstrap_servers, client_config)
    else:
        ends = log_end_offsets_from_data_dir(data_dir, partitions)
        lookups = lag_history.DataDirLookups(data_dir)
    end_of = {(topic, partition): end for topic, partition, end in ends}
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    details = lag_history.lag_details([tuple(r) for r in lag_history.commit_history(records).collect()], committed,
                                      end_of, lookups, now_ms)
    details_df = spark.createDataFrame([(*key, d.lag_seconds, d.status) for key, d in details.items()],
                                       details_schema())
    report = lag_report(snapshot, spark.createDataFrame(ends, log_end_schema()), details_df).cache()
    per_group = lag_per_group(report).cache()
    if output:
        write(report, output, fmt)
    if chart:
        current = {key: lag_math.records_lag(offset, end_of.get(key[1:])) for key, offset in committed.items()}
        draw_chart([(row.group, row.total_lag) for row in per_group.collect()], chart,
                   over_time=lag_history.group_lag_over_time(details, current, now_ms))
    return report, per_group
