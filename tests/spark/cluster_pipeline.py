"""A driver program for spark-submit: a batch read, then an availableNow streaming query from the
"tidemark" source (committing to a group) into the "tidemark" sink. What it read is written as
JSON for the test to check.

    spark-submit --master spark://... cluster_pipeline.py BOOTSTRAP TOPIC OUT_TOPIC GROUP CHECKPOINT RESULT
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from tidemark.spark import register

TIMEOUT_S = 300


def main(bootstrap: str, topic: str, out_topic: str, group: str, checkpoint: str, result: str) -> None:
    spark = SparkSession.builder.appName("tidemark-cluster-pipeline").getOrCreate()
    register(spark)
    batch = (spark.read.format("tidemark").option("bootstrap.servers", bootstrap).option("subscribe", topic)
             .load().collect())
    stream = (spark.readStream.format("tidemark").option("bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("group.id", group)
              .option("maxOffsetsPerTrigger", "40").load())
    query = (stream.selectExpr("key", "value").writeStream.format("tidemark")
             .option("bootstrap.servers", bootstrap).option("topic", out_topic)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    finished = query.awaitTermination(TIMEOUT_S)
    if not finished or query.exception() is not None:
        raise SystemExit(f"streaming query did not finish: {query.exception()}")
    with open(result, "w") as out:
        json.dump({
            "batch": [[r.partition, r.offset, r.value.decode()] for r in batch],
            "batches": len(query.recentProgress),
            "master": spark.sparkContext.master,
        }, out)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
