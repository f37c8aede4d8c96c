#!/usr/bin/env python3
"""Expected rows of a Delta table whose columns went through type widening,
computed with pyarrow alone: every live data file (JSON commits replayed) is
read with its own (possibly narrow) Parquet types and cast by pyarrow to the
Arrow type of the table's current Delta type. Output is the same as
deltars_rows.py (header line, then sorted canonical JSON rows), so Go tests
can compare it with our reader where delta-rs refuses the table.

usage: pyarrow_widened_rows.py TABLE_DIR
"""
import glob
import json
import os
import re
import sys
import urllib.parse

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deltars_rows import canon  # noqa: E402  (one canonical form for all oracles)

PRIMS = {
    "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(),
    "string": pa.string(), "binary": pa.binary(), "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}


def arrow_type(t):
    if isinstance(t, str):
        m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
        if m:
            return pa.decimal128(int(m.group(1)), int(m.group(2)))
        return PRIMS[t]
    if t["type"] == "struct":
        return pa.struct([pa.field(f["name"], arrow_type(f["type"])) for f in t["fields"]])
    if t["type"] == "array":
        return pa.list_(arrow_type(t["elementType"]))
    if t["type"] == "map":
        return pa.map_(arrow_type(t["keyType"]), arrow_type(t["valueType"]))
    raise ValueError(f"unsupported type {t}")


def main():
    root = sys.argv[1]
    if glob.glob(os.path.join(root, "_delta_log", "*.checkpoint*.parquet")):
        sys.exit("checkpoints are not replayed by this script")
    schema, live, version = None, {}, -1
    for c in sorted(glob.glob(os.path.join(root, "_delta_log", "*.json"))):
        version = int(os.path.basename(c).split(".")[0])
        for line in open(c):
            a = json.loads(line)
            if "metaData" in a:
                schema = json.loads(a["metaData"]["schemaString"])
            elif "add" in a:
                live[a["add"]["path"]] = True
            elif "remove" in a:
                live.pop(a["remove"]["path"], None)
    cols = [f["name"] for f in schema["fields"]]
    out = []
    for path in live:
        tbl = pq.read_table(os.path.join(root, urllib.parse.unquote(path)))
        arrays = []
        for f in schema["fields"]:
            arrays.append(tbl.column(f["name"]).cast(arrow_type(f["type"]), safe=True))
        for r in pa.table(arrays, names=cols).to_pylist():
            out.append(json.dumps({k: canon(r[k]) for k in cols}, sort_keys=True, separators=(",", ":")))
    out.sort()
    print(json.dumps({"version": version, "columns": cols}))
    for line in out:
        print(line)


if __name__ == "__main__":
    main()
