#!/usr/bin/env python3
"""Run one DuckDB SQL query (read from stdin) over Delta tables with the
`delta` extension loaded offline (PyPI wheel duckdb-extension-delta), and
print the result as a header line {"columns": [...]} then one canonical JSON
row per line, in the query's order. Used by the history package's tests to
run the queries of docs/history.md exactly as written.

usage: history_sql.py < query.sql
"""
import glob
import json
import os
import sys

from deltars_rows import canon


def main():
    import duckdb
    import duckdb_extension_delta

    ext = glob.glob(os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions", "*", "delta.duckdb_extension"))
    if not ext:
        sys.exit("duckdb-extension-delta ships no delta.duckdb_extension file")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.load_extension(ext[0])
    rel = con.execute(sys.stdin.read())
    names = [d[0] for d in rel.description]
    print(json.dumps({"columns": names}))
    # through Arrow: DuckDB's own conversion of timestamptz needs pytz
    for r in rel.fetch_arrow_table().to_pylist():
        print(json.dumps({n: canon(r[n]) for n in names}, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
