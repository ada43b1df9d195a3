"""What the offsets-log jobs share: the session, the read of the log, and writing results."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OUTPUT_FORMATS = ("parquet", "csv")


def spark_session(app_name: str, master: str | None = "local[*]") -> SparkSession:
    """The session to run on, with tidemark's formats registered.

    Under spark-submit (the driver then talks to spark-submit's JVM: PYSPARK_GATEWAY_PORT is
    set) or with a session already active, that session and its master are used unchanged;
    otherwise a new session named `app_name` runs on `master`. Python workers run this interpreter unless
    PYSPARK_PYTHON says otherwise.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tidemark.spark import register

    builder = SparkSession.builder
    launched_by_spark = "PYSPARK_GATEWAY_PORT" in os.environ or SparkSession.getActiveSession() is not None
    if not launched_by_spark:
        # A session of our own: quiet, no console progress bar drawn over the CLI's output.
        builder = builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
        if master:
            builder = builder.master(master)
        if (master or "").startswith("local"):
            # Everything runs in this machine: no driver, block manager or UI port off loopback.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = (builder.config("spark.driver.host", "127.0.0.1")
                       .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = builder.getOrCreate()
    if not launched_by_spark:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def read_offsets_log(spark: SparkSession, *, bootstrap_servers: str | None = None, data_dir: str | None = None,
                     options: dict[str, str] | None = None,
                     client_config: Mapping[str, str] | None = None) -> DataFrame:
    """The offsets log as rows of OFFSETS_LOG_SCHEMA, from a cluster or from a data directory.
    client_config (security.protocol, sasl.*, ssl.*) goes to the source as kafka.* options, as
    Spark's Kafka connector takes client settings."""
    if (bootstrap_servers is None) == (data_dir is None):
        raise ValueError("read the offsets log either from a cluster or from a data directory")
    reader = spark.read.format("tidemark-offsets").options(**(options or {}))
    reader = reader.options(**{f"kafka.{key}": str(value) for key, value in (client_config or {}).items()})
    if bootstrap_servers is not None:
        return reader.option("bootstrap.servers", bootstrap_servers).load()
    return reader.load(str(data_dir))


def write(df: DataFrame, path: str, fmt: str) -> None:
    """Write a result as Parquet or CSV (with a header line), replacing what was at `path`.

    CSV cannot hold arrays or structs: such columns are written as JSON strings. CSV is one part
    file (one header), for people and scripts to open; the reports are small."""
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r}, expected one of {', '.join(OUTPUT_FORMATS)}")
    if fmt == "csv":
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, MapType, StructType

        nested = (ArrayType, MapType, StructType)
        df = df.select([F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, nested) else F.col(f.name)
                        for f in df.schema.fields])
        df.coalesce(1).write.mode("overwrite").option("header", True).csv(path)
    else:
        df.write.mode("overwrite").parquet(path)
