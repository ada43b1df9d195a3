"""PySpark data sources and jobs: the client side of tidemark's Spark pipelines.

`register(spark)` makes two formats available on a SparkSession:

- "tidemark": topics of any Kafka-protocol cluster as a batch or streaming source and sink,
  committing each completed micro-batch's end offsets to a consumer group (`group.id`);
- "tidemark-offsets": the `__consumer_offsets` log, over the wire or from a data directory's
  segment files, one decoded row per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.spark.shipping import require_dependencies

# Spark imports our classes in Python workers that may lack what they import: say what is missing.
require_dependencies()

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the "tidemark" and "tidemark-offsets" formats on `spark`."""
    from tidemark.spark.offsets_source import OffsetsLogDataSource
    from tidemark.spark.source import TidemarkDataSource

    spark.dataSource.register(TidemarkDataSource)
    spark.dataSource.register(OffsetsLogDataSource)
