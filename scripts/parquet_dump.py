#!/usr/bin/env python3
"""Dump a Parquet file's rows as canonical JSON lines, read with pyarrow.

Used by delta/parquetio tests as an independent reader. One JSON object per
row (keys sorted), values canonicalised so Go can produce the same form:
  integers      -> JSON numbers
  float/double  -> strings, '%.17g' (NaN / Infinity / -Infinity)
  decimal       -> exact fixed-point strings with the column's scale
  date          -> days since epoch (int)
  timestamp     -> microseconds since epoch (int), INT96/millis/nanos included
  binary        -> lowercase hex string
  string        -> string
  struct        -> object, list -> array, map -> array of [key, value]

Usage: parquet_dump.py FILE [COLUMN ...]
       parquet_dump.py --many FILE...   (each file's rows preceded by {"__file__": FILE})
"""
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def norm_type(t):
    if pa.types.is_timestamp(t):
        return pa.int64(), True
    if pa.types.is_date32(t):
        return pa.int32(), True
    if pa.types.is_struct(t):
        fields, changed = [], False
        for f in t:
            nt, c = norm_type(f.type)
            changed |= c
            fields.append(pa.field(f.name, nt, f.nullable))
        return pa.struct(fields), changed
    if pa.types.is_map(t):
        kt, c1 = norm_type(t.key_type)
        vt, c2 = norm_type(t.item_type)
        return pa.map_(kt, pa.field("value", vt, t.item_field.nullable)), c1 or c2
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        vt, c = norm_type(t.value_type)
        return pa.list_(pa.field(t.value_field.name, vt, t.value_field.nullable)), c
    return t, False


def to_us_type(t):
    """Same shape as t with every timestamp as timestamp[us]."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, to_us_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(to_us_type(t.key_type), pa.field("value", to_us_type(t.item_type), t.item_field.nullable))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, to_us_type(t.value_type), t.value_field.nullable))
    return t


def canon(v, t):
    if v is None:
        return None
    if pa.types.is_floating(t):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return "%.17g" % v
    if pa.types.is_decimal(t):
        return format(v, "f")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return v.hex()
    if pa.types.is_struct(t):
        return {f.name: canon(v.get(f.name), f.type) for f in t}
    if pa.types.is_map(t):
        return [[canon(k, t.key_type), canon(x, t.item_type)] for k, x in v]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [canon(x, t.value_type) for x in v]
    return v


def main():
    if sys.argv[1] == "--many":
        for path in sys.argv[2:]:
            sys.stdout.write(json.dumps({"__file__": path}, ensure_ascii=False) + "\n")
            dump(path, None)
        return
    dump(sys.argv[1], sys.argv[2:] or None)


def dump(path, cols):
    table = pq.read_table(path, columns=cols, coerce_int96_timestamp_unit="us")
    out_cols = []
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        nt, changed = norm_type(t)
        if changed:
            col = col.cast(to_us_type(t)).cast(nt)
        out_cols.append((name, col.to_pylist(), nt))
    w = sys.stdout
    for i in range(table.num_rows):
        row = {name: canon(vals[i], nt) for name, vals, nt in out_cols}
        w.write(json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
        w.write("\n")


if __name__ == "__main__":
    main()
