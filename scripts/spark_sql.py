#!/usr/bin/env python3
"""Run Spark SQL queries (pyspark + delta-spark) in one Spark session and
print, per query, a header line {"query": I, "columns": [...]} then its rows
as canonical JSON lines (spark_rows.canon: the form deltars_rows.py and
history_sql.py print), in the query's order. Used by the history package's
tests to run the Spark SQL of docs/history.md as written.

usage: spark_sql.py < queries.json   (a JSON array of SQL strings)
"""
import json
import sys

from spark_rows import canon, session


def main():
    queries = json.load(sys.stdin)
    spark = session([])
    for i, q in enumerate(queries):
        df = spark.sql(q)
        cols = df.columns
        print(json.dumps({"query": i, "columns": cols}), flush=True)
        for r in df.collect():
            print(json.dumps({c: canon(r[c]) for c in cols}, sort_keys=True, separators=(",", ":")))
    spark.stop()


if __name__ == "__main__":
    main()
