#!/usr/bin/env python3
"""Independent Delta reader for cdc-sink's delta tests (delta-rs via `deltalake`).

Usage: deltars_inspect.py TABLE[#VERSION]... [--version N] [--app-ids a,b] [--rows]

Prints one JSON object per table (one line each, with "table") on stdout:
  {"ok": true, "version": N, "schema": <Spark schema JSON>, "files": [{"path", "size"}],
   "protocol": {...}, "configuration": {...}, "txns": {appId: version|null},
   "rows": [[...], ...] (with --rows; each row a list of str() values, sorted) }
or {"ok": false, "error": "..."} when delta-rs refuses the table. Exit status 0 either way.
"""
import argparse
import json
import sys
import urllib.parse


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tables", nargs="+")
    ap.add_argument("--version", type=int, default=None)
    ap.add_argument("--app-ids", default="")
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    for table in args.tables:
        out = inspect(table, args)
        out["table"] = table
        json.dump(out, sys.stdout, default=str)
        sys.stdout.write("\n")
        sys.stdout.flush()
    return 0


def inspect(table, args):
    out = {"ok": False}
    try:
        import pyarrow as pa
        from deltalake import DeltaTable

        path, version = table, args.version
        if "#" in table:
            path, v = table.rsplit("#", 1)
            version = int(v)
        dt = DeltaTable(path, version=version)
        out["version"] = dt.version()
        out["schema"] = json.loads(dt.schema().to_json())
        p = dt.protocol()
        out["protocol"] = {
            "minReaderVersion": p.min_reader_version,
            "minWriterVersion": p.min_writer_version,
            "readerFeatures": p.reader_features,
            "writerFeatures": p.writer_features,
        }
        md = dt.metadata()
        out["configuration"] = dict(md.configuration)
        out["partitionColumns"] = list(md.partition_columns)
        adds = pa.table(dt.get_add_actions(flatten=True))
        paths = adds.column("path").to_pylist()
        sizes = adds.column("size_bytes").to_pylist()
        out["files"] = sorted(
            ({"path": urllib.parse.unquote(p), "size": s} for p, s in zip(paths, sizes)),
            key=lambda f: f["path"],
        )
        txns = {}
        for app in [a for a in args.app_ids.split(",") if a]:
            txns[app] = dt.transaction_version(app)
        out["txns"] = txns
        out["ok"] = True
        if args.rows:
            try:
                from deltalake import QueryBuilder

                res = QueryBuilder().register("t", dt).execute("SELECT * FROM t")
                tbl = pa.table(res.read_all())
                rows = [[str(v) for v in r.values()] for r in tbl.to_pylist()]
                out["rowColumns"] = tbl.column_names
                out["rows"] = sorted(rows)
            except Exception as e:  # rows are optional; metadata still compared
                out["rowsError"] = f"{type(e).__name__}: {e}"
    except Exception as e:
        out = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    return out


if __name__ == "__main__":
    sys.exit(main())
