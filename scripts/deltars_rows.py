#!/usr/bin/env python3
"""Print every row of a Delta table, read by delta-rs (python `deltalake`),
as canonical JSON lines sorted by their text, preceded by a header line
{"version": V, "columns": [...]}. Deletion vectors are applied (QueryBuilder).

Canonical values: decimals as strings with their scale, timestamps as integer
microseconds since the epoch (UTC), dates as YYYY-MM-DD, binary as base64,
floats as JSON numbers. Used by Go tests to check that our tables read back
identically through an independent reader.

usage: deltars_rows.py TABLE_DIR_OR_URL [--where SQL_PREDICATE] [--version V] [--storage-option KEY=VALUE ...]

--version reads the table as of version V (time travel).

--storage-option is passed to DeltaTable(storage_options=...) (object stores:
AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, AWS_REGION, ...); repeatable. Options from
CDC_SINK_DELTARS_STORAGE_OPTIONS (a JSON object) come first.
"""
import base64
import datetime
import decimal
import json
import os
import sys

import pyarrow as pa

from deltalake import DeltaTable, QueryBuilder


def canon(v):
    if v is None:
        return None
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        delta = v - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        # maps come back as lists of (key, value) tuples
        return [canon(x) for x in v]
    return v


def main():
    path = sys.argv[1]
    where = None
    version = None
    opts = json.loads(os.environ.get("CDC_SINK_DELTARS_STORAGE_OPTIONS") or "{}")
    args = sys.argv[2:]
    while args:
        if len(args) < 2 or args[0] not in ("--where", "--version", "--storage-option"):
            sys.exit(f"usage: {sys.argv[0]} TABLE [--where SQL] [--version V] [--storage-option K=V ...]")
        if args[0] == "--where":
            where = args[1]
        elif args[0] == "--version":
            version = int(args[1])
        else:
            k, sep, v = args[1].partition("=")
            if not sep:
                sys.exit(f"--storage-option {args[1]!r}: want KEY=VALUE")
            opts[k] = v
        args = args[2:]
    dt = DeltaTable(path, version=version, storage_options=opts or None)
    sql = "SELECT * FROM t" + (f" WHERE {where}" if where else "")
    reader = QueryBuilder().register("t", dt).execute(sql)
    # delta-rs returns an arro3 reader; pyarrow takes it via the C stream interface.
    tbl = pa.RecordBatchReader.from_stream(reader).read_all()
    cols = tbl.column_names
    rows = tbl.to_pylist()
    out = [json.dumps({k: canon(r[k]) for k in cols}, sort_keys=True, separators=(",", ":")) for r in rows]
    out.sort()
    print(json.dumps({"version": dt.version(), "columns": cols}))
    for line in out:
        print(line)


if __name__ == "__main__":
    main()
