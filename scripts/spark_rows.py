#!/usr/bin/env python3
"""Read Delta tables with Spark (pyspark + delta-spark) and print, per table,
a header line {"table": DIR, "count": N, "columns": [...]} followed by the rows
as canonical JSON lines sorted by their text (same canonical form as
deltars_rows.py: decimals as strings with their scale, timestamps as integer
microseconds UTC, dates YYYY-MM-DD, binary base64).

One Spark session serves every table given, since startup dominates.

usage: spark_rows.py TABLE [TABLE...]

A TABLE is a directory or an s3:// / s3a:// URL, read through Hadoop's s3a
connector. s3a needs the hadoop-aws jars matching pyspark's Hadoop, fetched by
`scripts/stack/fetch.sh hadoop-aws` (a directory of jars, given in
CDC_SINK_HADOOP_AWS_LIBS), and takes the store from the AWS_* variables:
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (a plain http:// endpoint turns SSL
off), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; path-style
addressing unless CDC_SINK_SPARK_S3_PATH_STYLE=false.
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


def s3a_config(builder):
    """Adds the s3a jars and settings to the Spark builder (s3:// tables given)."""
    libs = os.environ.get("CDC_SINK_HADOOP_AWS_LIBS", "")
    if not libs or not os.path.isdir(libs):
        sys.exit("spark_rows.py: s3:// tables need CDC_SINK_HADOOP_AWS_LIBS, the hadoop-aws jars dir "
                 "(eval \"$(scripts/stack/fetch.sh hadoop-aws)\" prints it as HADOOP_AWS_LIBS)")
    jars = sorted(os.path.join(libs, f) for f in os.listdir(libs) if f.endswith(".jar"))
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    conf = {
        "spark.jars": ",".join(jars),
        # s3:// is not mapped to s3a by Hadoop; our locations use it (same meaning as s3a://).
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": os.environ.get("CDC_SINK_SPARK_S3_PATH_STYLE", "true"),
        "spark.hadoop.fs.s3a.endpoint.region": os.environ.get("AWS_REGION", "us-east-1"),
        # Static keys only: no instance metadata or profile lookups against a test store.
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "spark.hadoop.fs.s3a.secret.key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
    }
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder


def session(paths):
    """A local Spark session with Delta (and s3a when a path needs it)."""
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
    if any(p.startswith(("s3://", "s3a://")) for p in paths):
        builder = s3a_config(builder)
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main():
    spark = session(sys.argv[1:])
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
