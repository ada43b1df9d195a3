"""`make demo`: a PySpark streaming pipeline that keeps its progress in a consumer group.

    python -m demo.pipeline [--events N]

1. starts a tidemark broker on a free loopback port, in a temporary data directory;
2. produces the first half of a stream of click events (page views by page) to "demo-events";
3. runs a streaming count of events per page over it, committing each batch's end offsets to the
   consumer group "demo-pipeline", and stops the query once that half is counted;
4. produces the second half while the pipeline is down, then restarts the query from its
   checkpoint and lets it catch up;
5. shows `tidemark groups describe demo-pipeline` (lag 0 on every partition) and checks that the
   per-page counts equal what was produced: every event counted exactly once.

Exits 0 when both hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tests.conftest import BrokerProcess

TOPIC = "demo-events"
GROUP = "demo-pipeline"
PAGES = ("home", "search", "product", "cart", "checkout")
PARTITIONS = 3
WAIT_S = 300

console = Console()


def produce(bootstrap: str, events: range, rng: random.Random, produced: Counter) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10})
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"producing events {events.start}-{events.stop - 1}", total=len(events))
        for n in events:
            page = rng.choice(PAGES)
            producer.produce(TOPIC, page.encode(), f"user-{rng.randrange(1000)}".encode())
            produced[page] += 1
            if n % 1000 == 0:
                producer.poll(0)
                progress.update(task, completed=n - events.start)
        if producer.flush(60) != 0:
            raise SystemExit("the broker did not acknowledge every event")
    console.print(f"produced events {events.start}-{events.stop - 1} to {TOPIC}")


def start_counting(spark, bootstrap: str, checkpoint: Path):
    """The pipeline: a running count of events per page, progress committed to the group."""
    events = (spark.readStream.format("tidemark")
              .option("bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC)
              .option("startingOffsets", "earliest")
              .option("group.id", GROUP)
              .option("maxOffsetsPerTrigger", "2000")
              .load())
    counts = events.selectExpr("CAST(value AS STRING) AS page").groupBy("page").count()
    return (counts.writeStream.outputMode("complete").format("memory").queryName("page_counts")
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="500 milliseconds").start())


def wait_until_counted(spark, query, total: int) -> None:
    deadline = time.monotonic() + WAIT_S
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("pipeline counting", total=total)
        while True:
            if query.exception() is not None:
                raise SystemExit(f"the pipeline failed: {query.exception()}")
            counted = spark.sql("SELECT COALESCE(SUM(count), 0) AS n FROM page_counts").first().n
            progress.update(task, completed=counted)
            if counted >= total:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the pipeline counted {counted} of {total} events in {WAIT_S} s")
            time.sleep(0.25)


def describe_group(bootstrap: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "groups", "describe", GROUP,
                             "--bootstrap-server", bootstrap], check=False, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise SystemExit(f"tidemark groups describe failed: {result.stderr}")
    return result.stdout


def lags(describe_output: str) -> list[str]:
    lines = describe_output.strip().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("GROUP ")), None)
    if header is None:
        return []
    column = lines[header].split().index("LAG")
    return [line.split()[column] for line in lines[header + 1:] if line.strip()]


def wait_for_zero_lag(bootstrap: str) -> str:
    """The last batch's commit lands as the query plans its next trigger: wait for it, bounded."""
    deadline = time.monotonic() + WAIT_S
    while True:
        output = describe_group(bootstrap)
        if lags(output) and all(lag == "0" for lag in lags(output)):
            return output
        if time.monotonic() > deadline:
            return output
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="events in all (half before the restart)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark's ports, the UI's too, on loopback

    with tempfile.TemporaryDirectory(prefix="tidemark-demo-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": "0"}).start()
        try:
            return run(broker.bootstrap, Path(tmp), args.events)
        finally:
            broker.stop()
            broker.kill()


def run(bootstrap: str, tmp: Path, total: int) -> int:
    console.rule(f"tidemark broker on {bootstrap}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    rng, produced = random.Random(7), Counter()
    half = total // 2
    produce(bootstrap, range(half), rng, produced)

    console.rule("starting the Spark pipeline (local[2])")
    from pyspark.sql import SparkSession

    from tidemark.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("tidemark-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    checkpoint = tmp / "checkpoint"

    query = start_counting(spark, bootstrap, checkpoint)
    wait_until_counted(spark, query, half)
    query.stop()
    console.print(f"[bold]pipeline stopped halfway[/] after counting {half} events; the group so far:")
    print(describe_group(bootstrap))

    produce(bootstrap, range(half, total), rng, produced)
    console.rule("restarting the pipeline from its checkpoint")
    query = start_counting(spark, bootstrap, checkpoint)
    try:
        wait_until_counted(spark, query, total)
        described = wait_for_zero_lag(bootstrap)
    finally:
        query.stop()

    counted = {row.page: row["count"] for row in spark.sql("SELECT * FROM page_counts").collect()}
    spark.stop()
    table = Table(title="events per page")
    for column in ("page", "produced", "counted by Spark"):
        table.add_column(column, justify="right")
    for page in PAGES:
        table.add_row(page, str(produced[page]), str(counted.get(page, 0)))
    console.print(table)
    print(f"$ tidemark groups describe {GROUP} --bootstrap-server {bootstrap}")
    print(described)

    exact = counted == dict(produced)
    zero_lag = all(lag == "0" for lag in lags(described))
    console.print(f"every event counted exactly once: {'yes' if exact else 'NO'}")
    console.print(f"lag of {GROUP} is 0 on every partition: {'yes' if zero_lag else 'NO'}")
    return 0 if exact and zero_lag else 1


if __name__ == "__main__":
    sys.exit(main())
