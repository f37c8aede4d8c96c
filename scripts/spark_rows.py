#!/usr/bin/env python3
"""Read Delta tables with Spark (pyspark + delta-spark) and print, per table,
a header line {"table": DIR, "count": N, "columns": [...]} followed by the rows
as canonical JSON lines sorted by their text (same canonical form as
deltars_rows.py: decimals as strings with their scale, timestamps as integer
microseconds UTC, dates YYYY-MM-DD, binary base64).

One Spark session serves every table given, since startup dominates.

usage: spark_rows.py TABLE_DIR [TABLE_DIR...]
"""
import base64
import datetime
import decimal
import json
import os
import sys


def canon(v):
    if v is None:
        return None
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        d = v - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dict):
        return [[canon(k), canon(x)] for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))]
    if hasattr(v, "asDict"):  # a struct (pyspark Row is also a tuple: test first)
        return {k: canon(x) for k, x in v.asDict().items()}
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    return v


def main():
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("cdc-sink-spark-check")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Timestamps are compared as UTC instants.
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for path in sys.argv[1:]:
        df = spark.read.format("delta").load(path)
        rows = df.collect()
        cols = df.columns
        out = sorted(json.dumps({c: canon(r[c]) for c in cols}, sort_keys=True, separators=(",", ":")) for r in rows)
        print(json.dumps({"table": path, "count": len(rows), "columns": cols}), flush=True)
        for line in out:
            print(line)
    spark.stop()


if __name__ == "__main__":
    main()
