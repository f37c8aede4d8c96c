#!/usr/bin/env python3
"""Read a Delta table's live rows with DuckDB (the `delta` extension, loaded
offline from the PyPI wheel duckdb-extension-delta) or polars (delta-rs
under the hood), and print them like deltars_rows.py: a header line
{"engine": E, "columns": [...]} then canonical JSON rows sorted by text.

usage: engines_rows.py duckdb|polars TABLE_DIR [COLUMN ...]
"""
import glob
import json
import os
import sys

from deltars_rows import canon  # one canonical form for every reader


def duckdb_rows(path, cols):
    import duckdb
    import duckdb_extension_delta

    ext = glob.glob(os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions", "*", "delta.duckdb_extension"))
    if not ext:
        sys.exit("duckdb-extension-delta ships no delta.duckdb_extension file")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.load_extension(ext[0])  # offline: INSTALL would need the internet
    sel = ", ".join(f'"{c}"' for c in cols) if cols else "*"
    rel = con.execute(f"SELECT {sel} FROM delta_scan($1) WHERE NOT _cdc_deleted", [path])
    names = [d[0] for d in rel.description]
    return names, [dict(zip(names, r)) for r in rel.fetchall()]


def polars_rows(path, cols):
    import polars as pl

    df = pl.read_delta(path).filter(~pl.col("_cdc_deleted"))
    if cols:
        df = df.select(cols)
    return df.columns, df.to_dicts()


def main():
    engine, path, cols = sys.argv[1], sys.argv[2], sys.argv[3:]
    names, rows = {"duckdb": duckdb_rows, "polars": polars_rows}[engine](path, cols)
    print(json.dumps({"engine": engine, "columns": names}))
    out = sorted(json.dumps({k: canon(r[k]) for k in names}, sort_keys=True, separators=(",", ":")) for r in rows)
    for line in out:
        print(line)


if __name__ == "__main__":
    main()
