"""Spark contender: Structured Streaming from Kafka + foreachBatch MERGE into Delta.

The design of the articles (foreachBatch + MERGE), done right:
  * parse the Debezium JSON with from_json (schema-ful `{"schema","payload"}` or schemaless), or
    Avro with from_avro (spark-avro) after the Confluent frame, by the writer schema of each id
    (fetched from --registry, the ccompat API);
  * compute cdc-sink's source version string in SQL (docs/versioning.md; for these streams,
    without re-snapshot or incremental snapshot, (phase, commit, lsn) suffices):
        00000000-<phase>-<commit hex16>-<lsn hex16>-0000000000000000
  * per batch, keep the newest change per key (row_number over key ordered by version desc);
  * MERGE ... WHEN MATCHED AND s.version > t.version UPDATE * WHEN NOT MATCHED INSERT *,
    deletes written as tombstone rows (_cdc_deleted = true), Kafka tombstones dropped;
  * deletion vectors on, shuffle partitions = 2 (local[2]).

Protocol with bench/harness.py (all files in --work):
  1. bootstrap: batch-read the topic (the snapshot only is there), write the table, append
     {"bootstrap": true, "offsets": {...}} to progress.jsonl;
  2. wait for the file `go`;
  3. stream from the bootstrap offsets with maxOffsetsPerTrigger = --batch, one progress line
     per committed batch {"batch", "t_start", "t_end", "n", "offsets"};
  4. stop when the file `stop` ({"partition": end offset}) is covered.
"""
import argparse
import json
import os
import sys
import time
from functools import reduce

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from registry import writer_schema

PACKAGES = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1,io.delta:delta-spark_2.13:4.0.0"
AVRO_PACKAGE = "org.apache.spark:spark-avro_2.13:4.0.1"  # from_avro, for --format avro only
# The Central mirror here lacks spark-token-provider-kafka-0-10_2.13:4.0.1 (404), a dependency of
# spark-sql-kafka: exclude it from the Ivy resolution and put the 4.0.0 jar (same API) on the
# classpath, downloaded once from Maven Central into ~/.cache/cdc-sink-bench.
TOKEN_JAR_URL = ("https://repo1.maven.org/maven2/org/apache/spark/spark-token-provider-kafka-0-10_2.13/4.0.0/"
                 "spark-token-provider-kafka-0-10_2.13-4.0.0.jar")


def token_jar():
    d = os.path.join(os.path.expanduser("~"), ".cache", "cdc-sink-bench")
    path = os.path.join(d, os.path.basename(TOKEN_JAR_URL))
    if not os.path.exists(path):
        import urllib.request
        os.makedirs(d, exist_ok=True)
        urllib.request.urlretrieve(TOKEN_JAR_URL, path + ".tmp")
        os.rename(path + ".tmp", path)
    return path

# slf4j/lz4/snappy ship with pyspark; the local ~/.m2 has broken copies of them.
EXCLUDES = ("org.apache.spark:spark-token-provider-kafka-0-10_2.13,org.slf4j:slf4j-api,"
            "org.lz4:lz4-java,org.xerial.snappy:snappy-java")

ROW = """id BIGINT, customer_id INT, status STRING, amount STRING, created_at STRING,
  updated_at BIGINT, ship_date INT, payload STRING, tags ARRAY<STRING>, note STRING, uuid STRING,
  paid BOOLEAN, filler STRING"""
ENV = f"""before STRUCT<{ROW}>, after STRUCT<{ROW}>,
  source STRUCT<snapshot: STRING, sequence: STRING, lsn: BIGINT, ts_us: BIGINT>, op STRING"""

SNAPSHOT_VALUES = "('true','first','first_in_data_collection','last_in_data_collection','last')"


def hex16(col):
    return F.lpad(F.lower(F.hex(col)), 16, "0")


def schema_id():
    """The schema id of a Confluent-framed Avro value (bytes 2-5, big-endian)."""
    return F.conv(F.hex(F.substring(F.col("value"), 2, 4)), 16, 10).cast("int")


def parse(df, fmt, avro=None):
    """Kafka rows (key, value, partition, offset) -> typed change rows with _cdc_ columns.

    fmt json-schema / json-plain: from_json of the envelope (with or without the schema-ful
    {"schema","payload"} wrapper). avro: from_avro of the datum after the 5-byte Confluent frame,
    once per writer schema id present (avro: {id: schema JSON}), the typed rows unioned."""
    df = df.where(F.col("value").isNotNull())
    if fmt == "avro":
        from pyspark.sql.avro.functions import from_avro
        datum = F.expr("substring(value, 6, length(value) - 5)")
        frames = [changes(df.where(schema_id() == sid).select(from_avro(datum, text).alias("p"), "partition", "offset"),
                          lambda amount: amount.cast("decimal(12,2)"))
                  for sid, text in sorted(avro.items())]
        if not frames:  # no Avro value seen yet: no rows (the JSON parse gives the empty frame its columns)
            return parse(df.limit(0), "json-plain")
        return reduce(lambda x, y: x.unionByName(y), frames)
    schema = f"payload STRUCT<{ENV}>" if fmt == "json-schema" else ENV
    v = F.from_json(F.col("value").cast("string"), schema)
    df = df.select(v.alias("v"), "partition", "offset")
    p = "v.payload" if fmt == "json-schema" else "v"
    return changes(df.select(F.col(p).alias("p"), "partition", "offset"), json_amount)


def json_amount(col):
    """Debezium Decimal in JSON: base64 of the big-endian two's-complement unscaled value
    (scale 2)."""
    b = F.unbase64(col)
    h = F.hex(b)
    unsigned = F.conv(h, 16, 10).cast("decimal(38,0)")
    signed = F.when(F.conv(F.substring(h, 1, 2), 16, 10).cast("int") >= 128,
                    unsigned - F.pow(F.lit(2), F.length(b) * 8).cast("decimal(38,0)")).otherwise(unsigned)
    return (signed / F.lit(100)).cast("decimal(12,2)")


def changes(df, amount):
    """Envelope rows (p: before/after/source/op) -> the table's columns and _cdc_ columns."""
    df = df.where(F.col("p.op").isin("c", "u", "d", "r"))
    seq = F.from_json(F.col("p.source.sequence"), "ARRAY<STRING>")
    phase = F.when(F.col("p.source.snapshot").isin("true", "first", "first_in_data_collection",
                                                    "last_in_data_collection", "last"), F.lit("0")).otherwise(F.lit("1"))
    commit = F.coalesce(seq.getItem(0).cast("bigint"), F.lit(0).cast("bigint"))
    lsn = F.coalesce(seq.getItem(1).cast("bigint"), F.col("p.source.lsn"))
    version = F.concat(F.lit("00000000-"), phase, F.lit("-"), hex16(commit), F.lit("-"), hex16(lsn),
                       F.lit("-0000000000000000"))
    a = "p.after"
    deleted = F.col("p.op") == "d"
    return df.select(
        F.coalesce(F.col(f"{a}.id"), F.col("p.before.id")).alias("id"),
        F.col(f"{a}.customer_id").alias("customer_id"),
        F.col(f"{a}.status").alias("status"),
        amount(F.col(f"{a}.amount")).alias("amount"),
        F.to_timestamp(F.col(f"{a}.created_at")).alias("created_at"),
        F.timestamp_micros(F.col(f"{a}.updated_at")).alias("updated_at"),
        F.date_from_unix_date(F.col(f"{a}.ship_date")).alias("ship_date"),
        F.col(f"{a}.payload").alias("payload"),
        F.col(f"{a}.tags").alias("tags"),
        F.col(f"{a}.note").alias("note"),
        F.col(f"{a}.uuid").alias("uuid"),
        F.col(f"{a}.paid").alias("paid"),
        F.col(f"{a}.filler").alias("filler"),
        deleted.alias("_cdc_deleted"),
        version.alias("_cdc_source_version"),
        F.col("p.op").alias("_cdc_op"),
        F.timestamp_micros(F.col("p.source.ts_us")).alias("_cdc_source_ts"),
        "partition", "offset",
    )


def newest_per_key(changes):
    w = Window.partitionBy("id").orderBy(F.col("_cdc_source_version").desc(), F.col("offset").desc())
    return changes.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn", "partition", "offset")


def log(progress, rec):
    with open(progress, "a") as f:
        f.write(json.dumps(rec) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--format", default="json-schema", choices=["json-schema", "json-plain", "avro"])
    ap.add_argument("--registry", default="", help="Confluent-compatible registry URL (--format avro)")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--partitions", type=int, default=1, help="topic partitions (for startingOffsets)")
    a = ap.parse_args()
    if a.format == "avro" and not a.registry:
        ap.error("--format avro needs --registry")
    avro = {}  # schema id -> writer schema text, fetched when an id is first seen

    def learn(ids):
        for sid in ids:
            if sid not in avro:
                avro[sid] = writer_schema(a.registry, sid)
    progress = os.path.join(a.work, "progress.jsonl")
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-sink")
             .config("spark.jars.packages", PACKAGES + ("," + AVRO_PACKAGE if a.format == "avro" else ""))
             .config("spark.jars.excludes", EXCLUDES)
             .config("spark.jars", token_jar())
             .config("spark.driver.memory", a.driver_memory)
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             # INT96 (the default) cannot hold years past 2262 for other readers (delta-rs)
             .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
             .config("spark.ui.enabled", "false")
             .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    from delta.tables import DeltaTable

    # 1. bootstrap from the snapshot records (whatever the topic holds now)
    t0 = time.time()
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", a.brokers).option("subscribe", a.topic)
           .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
           .select("value", "partition", "offset")).persist()
    offs = {str(r["partition"]): r["o"] + 1 for r in raw.groupBy("partition").agg(F.max("offset").alias("o")).collect()}
    if a.format == "avro":
        learn(r[0] for r in raw.where(F.col("value").isNotNull()).select(schema_id()).distinct().collect())
    (newest_per_key(parse(raw, a.format, avro)).write.format("delta").mode("overwrite")
     .option("delta.enableDeletionVectors", "true").save(a.table))
    raw.unpersist()
    log(progress, {"bootstrap": True, "offsets": offs, "seconds": time.time() - t0, "t_end": time.time()})
    print(f"spark: bootstrapped {a.table} in {time.time()-t0:.1f}s, offsets {offs}", file=sys.stderr, flush=True)

    # 2. wait for the backlog
    go = os.path.join(a.work, "go")
    while not os.path.exists(go):
        time.sleep(0.2)

    target = DeltaTable.forPath(spark, a.table)
    state = {"offsets": dict(offs)}

    def apply(df, batch_id):
        ts = time.time()
        df = df.select("value", "partition", "offset").persist()
        aggs = [F.max("offset").alias("o"), F.count("*").alias("n")]
        if a.format == "avro":  # the batch's schema ids, in the same pass as its offsets
            aggs.append(F.collect_set(F.when(F.col("value").isNotNull(), schema_id())).alias("ids"))
        stats = df.groupBy("partition").agg(*aggs).collect()
        if not stats:
            df.unpersist()
            return
        if a.format == "avro":
            learn(sid for r in stats for sid in r["ids"])
        src = newest_per_key(parse(df, a.format, avro))
        (target.alias("t").merge(src.alias("s"), "t.id = s.id")
         .whenMatchedUpdateAll(condition="s._cdc_source_version > t._cdc_source_version")
         .whenNotMatchedInsertAll().execute())
        df.unpersist()
        for r in stats:
            state["offsets"][str(r["partition"])] = r["o"] + 1
        log(progress, {"batch": batch_id, "t_start": ts, "t_end": time.time(), "n": sum(r["n"] for r in stats),
                       "offsets": dict(state["offsets"])})

    start = json.dumps({a.topic: {str(p): offs.get(str(p), -2) for p in range(a.partitions)}})
    q = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", a.brokers).option("subscribe", a.topic)
         .option("startingOffsets", start).option("maxOffsetsPerTrigger", a.batch)
         .option("failOnDataLoss", "false").load()
         .writeStream.foreachBatch(apply).option("checkpointLocation", os.path.join(a.work, "checkpoint"))
         .start())
    stop = os.path.join(a.work, "stop")
    while q.isActive:
        time.sleep(0.5)
        if os.path.exists(stop):
            try:
                want = json.load(open(stop))
            except ValueError:
                continue
            if all(state["offsets"].get(p, 0) >= o for p, o in want.items()):
                q.stop()
                break
    if q.exception():
        print("spark: query failed:", q.exception(), file=sys.stderr)
        sys.exit(1)
    spark.stop()


if __name__ == "__main__":
    main()
