"""delta-rs contender: confluent-kafka consumer loop + deltalake MERGE.

Same semantics as the Spark contender (bench/contenders/spark_sink.py): Debezium JSON parsed
per record (json.loads), or Avro in the Confluent frame decoded with fastavro by the writer
schema its id names (fetched once per id from --registry, the ccompat API); cdc-sink's version
string from (phase, commit, lsn), newest change per key per batch, then

    DeltaTable.merge(source, "t.id = s.id")
      .when_matched_update_all(predicate="s._cdc_source_version > t._cdc_source_version")
      .when_not_matched_insert_all()

with deletes as tombstone rows (_cdc_deleted = true). A batch is cut at --batch records or
--max-interval seconds after its first record (cdc-sink's trigger). Same file protocol with
bench/harness.py as the Spark contender (progress.jsonl, go, stop).
"""
import argparse
import base64
import datetime as dt
import decimal
import io
import json
import os
import sys
import time

import fastavro
import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable, write_deltalake
from registry import writer_schema

SNAP = {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
D2 = decimal.Decimal("0.01")

SCHEMA = pa.schema([
    ("id", pa.int64()), ("customer_id", pa.int32()), ("status", pa.string()),
    ("amount", pa.decimal128(12, 2)), ("created_at", pa.timestamp("us", tz="UTC")),
    ("updated_at", pa.timestamp("us", tz="UTC")), ("ship_date", pa.date32()), ("payload", pa.string()),
    ("tags", pa.list_(pa.string())), ("note", pa.string()), ("uuid", pa.string()), ("paid", pa.bool_()),
    ("filler", pa.string()), ("_cdc_deleted", pa.bool_()), ("_cdc_source_version", pa.string()),
    ("_cdc_op", pa.string()), ("_cdc_source_ts", pa.timestamp("us", tz="UTC")),
])
COLS = [f.name for f in SCHEMA]


def iso_micros(s):
    d = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (d - EPOCH) // dt.timedelta(microseconds=1)


def amount(b64):
    if b64 is None:
        return None
    n = int.from_bytes(base64.b64decode(b64), "big", signed=True)
    return decimal.Decimal(n).scaleb(-2).quantize(D2)


class AvroValues:
    """Decodes Confluent-framed Avro values (magic 0, 4-byte schema id, the datum) with the
    writer schema of each id, fetched from the registry's ccompat API the first time it is seen."""

    def __init__(self, registry):
        self.registry = registry
        self.schemas = {}

    def schema(self, sid):
        s = self.schemas.get(sid)
        if s is None:
            s = self.schemas[sid] = fastavro.parse_schema(json.loads(writer_schema(self.registry, sid)))
        return s

    def __call__(self, value):
        if len(value) < 5 or value[0] != 0:
            raise ValueError(f"not a Confluent Avro frame (first byte {value[:1]!r})")
        return fastavro.schemaless_reader(io.BytesIO(value[5:]), self.schema(int.from_bytes(value[1:5], "big")))


def parse(value, decode):
    """One Debezium value -> (id, version, row tuple) or None. decode turns the bytes into the
    envelope dict: json.loads, the schema-ful JSON's payload, or AvroValues."""
    v = decode(value)
    if not isinstance(v, dict) or v.get("op") not in ("c", "u", "d", "r"):
        return None
    src = v["source"]
    phase = "0" if src.get("snapshot") in SNAP else "1"
    seq = json.loads(src["sequence"]) if src.get("sequence") else [None, None]
    commit = int(seq[0]) if seq[0] is not None else 0
    lsn = int(seq[1]) if seq[1] is not None else src.get("lsn")
    version = f"00000000-{phase}-{commit:016x}-{lsn:016x}-0000000000000000"
    op = v["op"]
    a = v.get("after")
    if op == "d" or a is None:
        kid = (v.get("before") or {}).get("id")
        row = (kid,) + (None,) * 12 + (True, version, op, src.get("ts_us"))
    else:
        kid = a["id"]
        amt = a.get("amount")  # JSON: base64 of the unscaled value; Avro: a Decimal already
        row = (kid, a.get("customer_id"), a.get("status"),
               amt.quantize(D2) if isinstance(amt, decimal.Decimal) else amount(amt),
               iso_micros(a["created_at"]) if a.get("created_at") is not None else None,
               a.get("updated_at"), a.get("ship_date"), a.get("payload"), a.get("tags"), a.get("note"),
               a.get("uuid"), a.get("paid"), a.get("filler"), False, version, op, src.get("ts_us"))
    return kid, version, row


def to_table(rows):
    cols = list(zip(*rows)) if rows else [[] for _ in COLS]
    arrays = []
    for f, c in zip(SCHEMA, cols):
        if pa.types.is_timestamp(f.type):
            arrays.append(pa.array(c, pa.int64()).cast(f.type))
        elif pa.types.is_date32(f.type):
            arrays.append(pa.array(c, pa.int32()).cast(f.type))
        else:
            arrays.append(pa.array(c, f.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def newest(msgs, decode):
    best = {}
    for m in msgs:
        if m.value() is None:  # Kafka tombstone: the delete before it decided
            continue
        r = parse(m.value(), decode)
        if r is None:
            continue
        kid, ver, row = r
        cur = best.get(kid)
        if cur is None or ver >= cur[0]:
            best[kid] = (ver, row)
    return [row for _, row in best.values()]


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
    ap.add_argument("--max-interval", type=float, default=0.25)
    ap.add_argument("--format", default="json-schema", choices=["json-schema", "json-plain", "avro"])
    ap.add_argument("--registry", default="", help="Confluent-compatible registry URL (--format avro)")
    ap.add_argument("--group", default="bench.deltars")
    ap.add_argument("--bootstrap-chunk", type=int, default=500000, help="snapshot rows per bootstrap write")
    a = ap.parse_args()
    if a.format == "avro":
        if not a.registry:
            ap.error("--format avro needs --registry")
        decode = AvroValues(a.registry)
    elif a.format == "json-schema":
        decode = lambda b: json.loads(b).get("payload")
    else:
        decode = json.loads
    progress = os.path.join(a.work, "progress.jsonl")
    c = Consumer({"bootstrap.servers": a.brokers, "group.id": a.group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20})
    md = c.list_topics(a.topic, timeout=30).topics[a.topic]
    parts = sorted(md.partitions)

    # 1. bootstrap: everything the topic holds now (the snapshot), written in chunks of
    #    --bootstrap-chunk rows so memory stays bounded at 10M rows. A Debezium snapshot reads
    #    each row once, so keys are distinct across chunks; within a chunk newest() still applies.
    t0 = time.time()
    lo_hi = {p: c.get_watermark_offsets(TopicPartition(a.topic, p), timeout=30) for p in parts}
    c.assign([TopicPartition(a.topic, p, lo_hi[p][0]) for p in parts])
    offs = {str(p): lo_hi[p][0] for p in parts}
    msgs = []
    mode = "overwrite"
    pending = {p for p in parts if lo_hi[p][1] > lo_hi[p][0]}
    while pending or msgs:
        got = c.consume(10000, 1.0) if pending else []
        for m in got:
            if m.error():
                continue
            if m.offset() + 1 >= lo_hi[m.partition()][1]:
                pending.discard(m.partition())
            if m.offset() < lo_hi[m.partition()][1]:
                msgs.append(m)
                offs[str(m.partition())] = m.offset() + 1
        if msgs and (len(msgs) >= a.bootstrap_chunk or not pending):
            write_deltalake(a.table, to_table(newest(msgs, decode)), mode=mode)
            mode = "append"
            msgs = []
    if mode == "overwrite":  # empty snapshot: still create the table
        write_deltalake(a.table, to_table([]), mode="overwrite")
    log(progress, {"bootstrap": True, "offsets": offs, "seconds": time.time() - t0, "t_end": time.time()})
    print(f"deltars: bootstrapped {a.table} in {time.time()-t0:.1f}s, offsets {offs}", file=sys.stderr, flush=True)

    go = os.path.join(a.work, "go")
    while not os.path.exists(go):
        time.sleep(0.2)
    stop = os.path.join(a.work, "stop")
    c.assign([TopicPartition(a.topic, int(p), o) for p, o in offs.items()])
    dtab = DeltaTable(a.table)
    batch_id = 0
    want = None
    while True:
        buf, first = [], None
        while len(buf) < a.batch:
            wait = 0.2 if first is None else max(0.001, a.max_interval - (time.time() - first))
            got = [m for m in c.consume(min(a.batch - len(buf), 10000), wait) if not m.error()]
            if got and first is None:
                first = time.time()
            buf.extend(got)
            if first is not None and time.time() - first >= a.max_interval:
                break
            if not got and first is None:
                break
        if buf:
            ts = time.time()
            rows = newest(buf, decode)
            if rows:
                (dtab.merge(source=to_table(rows), predicate="t.id = s.id", source_alias="s", target_alias="t")
                 .when_matched_update_all(predicate="s._cdc_source_version > t._cdc_source_version")
                 .when_not_matched_insert_all().execute())
            for m in buf:
                offs[str(m.partition())] = max(offs[str(m.partition())], m.offset() + 1)
            log(progress, {"batch": batch_id, "t_start": ts, "t_end": time.time(), "n": len(buf),
                           "offsets": dict(offs), "version": dtab.version()})
            batch_id += 1
        if want is None and os.path.exists(stop):
            try:
                want = json.load(open(stop))
            except ValueError:
                want = None
        if want is not None and all(offs.get(p, 0) >= o for p, o in want.items()):
            break
    c.close()


if __name__ == "__main__":
    main()
