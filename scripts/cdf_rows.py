#!/usr/bin/env python3
"""Print the Change Data Feed of Delta tables as one engine reads it: per table a
header line {"table": DIR, "count": N, "columns": [...]} followed by the change
rows as canonical JSON lines (same canonical values as deltars_rows.py /
spark_rows.py), sorted by their text. Every row has the table's columns,
_change_type and _commit_version; _commit_timestamp is left out (wall clock).

usage: cdf_rows.py deltars|spark STARTING_VERSION TABLE [TABLE...]

deltars: DeltaTable(TABLE).load_cdf(starting_version=STARTING_VERSION)
spark:   spark.read.format("delta").option("readChangeFeed", "true")
              .option("startingVersion", STARTING_VERSION).load(TABLE)
"""
import json
import sys


def emit(path, cols, rows, canon):
    cols = [c for c in cols if c != "_commit_timestamp"]
    out = sorted(json.dumps({c: canon(r[c]) for c in cols}, sort_keys=True, separators=(",", ":")) for r in rows)
    print(json.dumps({"table": path, "count": len(out), "columns": cols}), flush=True)
    for line in out:
        print(line)


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("deltars", "spark"):
        sys.exit(__doc__)
    engine, start, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if engine == "deltars":
        import pyarrow as pa
        from deltalake import DeltaTable

        from deltars_rows import canon

        for path in paths:
            reader = DeltaTable(path).load_cdf(starting_version=start)
            tbl = pa.RecordBatchReader.from_stream(reader).read_all()
            emit(path, tbl.column_names, tbl.to_pylist(), canon)
        return
    from spark_rows import canon, session

    spark = session(paths)
    for path in paths:
        df = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start).load(path)
        emit(path, df.columns, df.collect(), canon)
    spark.stop()


if __name__ == "__main__":
    main()
