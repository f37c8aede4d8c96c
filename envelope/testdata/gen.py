#!/usr/bin/env python3
"""Generates the envelope test fixtures: Debezium 3.6 PostgreSQL change events
for table public.orders (topic.prefix=dbz) as the Kafka Connect JsonConverter
writes them (schemas.enable=true and false), the ExtractNewRecordState forms,
and the Connect-style Avro schemas (as Confluent/Apicurio AvroData write them)
plus the Avro JSON encoding of each value (the Go test turns that into binary
with goavro).

Shapes follow /work/shared/research/debezium.md (PART A). Run:
    python3 gen.py    (from envelope/testdata)
"""
import base64, json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
P = "dbz"


def dump(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def write(path, data):
    full = os.path.join(HERE, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(data)


# ---- Connect schemas (JsonConverter key order: type, [fields|items|keys,values],
# optional, name, version, parameters, default, field) ----

# JsonConverter spells FLOAT32/FLOAT64 "float"/"double" (Kafka JsonSchema)
JSON_TYPE = {"float32": "float", "float64": "double"}


def prim(t, field, optional=True, name=None, version=None, params=None, default=None):
    s = {"type": JSON_TYPE.get(t, t), "optional": optional}
    if name:
        s["name"] = name
    if version is not None:
        s["version"] = version
    if params:
        s["parameters"] = params
    if default is not None:
        s["default"] = default
    if field:
        s["field"] = field
    return s


def struct_(fields, name, optional=False, version=None, field=None):
    s = {"type": "struct", "fields": fields, "optional": optional, "name": name}
    if version is not None:
        s["version"] = version
    if field:
        s["field"] = field
    return s


def row_fields():
    return [
        prim("int32", "id", optional=False, default=0),
        prim("int64", "customer_id", optional=False),
        prim("string", "status", optional=False, default="new"),
        prim("int16", "qty"),
        prim("bytes", "price", name="org.apache.kafka.connect.data.Decimal", version=1,
             params={"scale": "2", "connect.decimal.precision": "10"}),
        struct_([prim("int32", "scale", optional=False), prim("bytes", "value", optional=False)],
                "io.debezium.data.VariableScaleDecimal", optional=True, version=1, field="discount")
        | {"doc": "Variable scaled decimal"},
        prim("float32", "weight"),
        prim("float64", "ratio"),
        prim("boolean", "active", optional=False, default=False),
        prim("int64", "created_at", name="io.debezium.time.MicroTimestamp", version=1),
        prim("string", "updated_at", name="io.debezium.time.ZonedTimestamp", version=1),
        prim("int32", "ship_date", name="io.debezium.time.Date", version=1),
        prim("int64", "ship_time", name="io.debezium.time.MicroTime", version=1),
        prim("string", "note"),
        {"type": "array", "items": {"type": "string", "optional": True}, "optional": True, "field": "tags"},
        prim("string", "attrs", name="io.debezium.data.Json", version=1),
        prim("string", "uid", name="io.debezium.data.Uuid", version=1),
        prim("bytes", "data"),
        prim("string", "kind", name="io.debezium.data.Enum", version=1, params={"allowed": "retail,wholesale,internal"}),
        struct_([prim("float64", "x", optional=False), prim("float64", "y", optional=False),
                 prim("bytes", "wkb"), prim("int32", "srid")],
                "io.debezium.data.geometry.Point", optional=True, version=1, field="location")
        | {"doc": "Geometry (POINT)"},
        prim("int64", "duration", name="io.debezium.time.MicroDuration", version=1),
        {"type": "map", "keys": {"type": "string", "optional": False},
         "values": {"type": "string", "optional": True}, "optional": True, "field": "props"},
    ]


def fix_doc_order(s):
    # JsonConverter writes doc after version; our struct_ helper appended it last. Reorder.
    if isinstance(s, dict):
        if "doc" in s:
            order = ["type", "fields", "items", "keys", "values", "optional", "name", "version", "doc", "parameters", "default", "field"]
            s2 = {k: s[k] for k in order if k in s}
            s.clear()
            s.update(s2)
        for v in s.values():
            fix_doc_order(v)
    elif isinstance(s, list):
        for v in s:
            fix_doc_order(v)
    return s


def source_fields():
    return [
        prim("string", "version", optional=False),
        prim("string", "connector", optional=False),
        prim("string", "name", optional=False),
        prim("int64", "ts_ms", optional=False),
        prim("string", "snapshot", name="io.debezium.data.Enum", version=1,
             params={"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
             default="false"),
        prim("string", "db", optional=False),
        prim("string", "sequence"),
        prim("int64", "ts_us"),
        prim("int64", "ts_ns"),
        prim("string", "schema", optional=False),
        prim("string", "table", optional=False),
        prim("int64", "txId"),
        prim("int64", "lsn"),
        prim("int64", "xmin"),
        prim("string", "origin"),
        prim("int64", "origin_lsn"),
    ]


def tx_block():
    return struct_([prim("string", "id", optional=False), prim("int64", "total_order", optional=False),
                    prim("int64", "data_collection_order", optional=False)],
                   "event.block", optional=True, version=1, field="transaction")


def envelope_schema():
    value = lambda f: struct_(row_fields(), f"{P}.public.orders.Value", optional=True, field=f)
    return fix_doc_order(struct_([
        value("before"), value("after"),
        struct_(source_fields(), "io.debezium.connector.postgresql.Source", field="source"),
        prim("string", "op", optional=False),
        prim("int64", "ts_ms"), prim("int64", "ts_us"), prim("int64", "ts_ns"),
        tx_block(),
    ], f"{P}.public.orders.Envelope", version=2))


def key_schema():
    return struct_([prim("int32", "id", optional=False, default=0)], f"{P}.public.orders.Key")


def flat_schema(extra):
    s = fix_doc_order(struct_(row_fields(), f"{P}.public.orders.Value"))
    s["fields"] += extra
    return s


FLAT_EXTRA = [prim("string", "__op"), prim("int64", "__lsn"), prim("int64", "__source_ts_ms"),
              prim("int64", "__source_ts_us"), prim("string", "__source_sequence"),
              prim("string", "__table"), prim("string", "__db"), prim("string", "__schema"),
              prim("string", "__snapshot", name="io.debezium.data.Enum", version=1,
                   params={"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
                   default="false"),
              prim("int64", "__txId"), prim("string", "__deleted")]

# ---- payloads ----

def b64(b):
    return base64.b64encode(b).decode()


def dec_bytes(unscaled):
    n = (unscaled.bit_length() + 8) // 8
    return unscaled.to_bytes(n, "big", signed=True)


WKB = b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.5, 2.5)
PLACEHOLDER = "__debezium_unavailable_value"


def row(id_=1, **over):
    r = {
        "id": id_, "customer_id": 9007199254740993, "status": "new", "qty": 3,
        "price": b64(dec_bytes(1234)),                     # 12.34 -> "BNI="
        "discount": {"scale": 3, "value": b64(dec_bytes(12340))},  # 12.340
        "weight": 1.1, "ratio": 0.3333333333333333, "active": True,
        "created_at": 1700000000123456,                    # MicroTimestamp
        "updated_at": "2023-11-14T22:13:20.123456Z",       # ZonedTimestamp
        "ship_date": 19675, "ship_time": 45296789012,
        "note": "caf\u00e9 \"quoted\" \\ line\nnext \U0001F600",
        "tags": ["a", None, "c"],
        "attrs": "{\"k\": [1, 2]}",
        "uid": "b68a35a7-17ad-35b3-af2a-ae46edb4545a",
        "data": b64(b"\x00\x01\xfe\xff"),
        "kind": "retail",
        "location": {"x": 1.5, "y": 2.5, "wkb": b64(WKB), "srid": None},
        "duration": 3600000000,
        "props": {"color": "red", "size": None},
    }
    r.update(over)
    return r


def source(lsn=24023128, commit=24023119, snapshot="false", ts_ms=1700000000123, tx=771, **over):
    s = {"version": "3.6.1.Final", "connector": "postgresql", "name": P, "ts_ms": ts_ms,
         "snapshot": snapshot, "db": "app",
         "sequence": json.dumps([None if commit is None else str(commit), str(lsn)], separators=(",", ":")),
         "ts_us": ts_ms * 1000 + 456, "ts_ns": (ts_ms * 1000 + 456) * 1000,
         "schema": "public", "table": "orders", "txId": tx, "lsn": lsn, "xmin": None,
         "origin": None, "origin_lsn": None}
    s.update(over)
    return s


def envelope(op, before, after, src, tx=None):
    return {"before": before, "after": after, "source": src, "op": op,
            "ts_ms": 1700000000200, "ts_us": 1700000000200111, "ts_ns": 1700000000200111000,
            "transaction": tx}


def txinfo(order):
    return {"id": "771:24023128", "total_order": order, "data_collection_order": order}


DELETE_BEFORE = row(7, customer_id=0, status="", qty=None, price=None, discount=None, weight=None,
                    ratio=None, active=False, created_at=None, updated_at=None, ship_date=None,
                    ship_time=None, note=None, tags=None, attrs=None, uid=None, data=None, kind=None,
                    location=None, duration=None, props=None)

CHANGES = {
    "orders_c": ({"id": 1}, envelope("c", None, row(1), source(), txinfo(1)), []),
    "orders_u": ({"id": 1}, envelope("u", None, row(1, status="shipped", note=PLACEHOLDER,
                                                       data=b64(PLACEHOLDER.encode()), tags=[PLACEHOLDER]),
                                     source(lsn=24023200, commit=24023190, tx=772), txinfo(1)), []),
    "orders_d": ({"id": 7}, envelope("d", DELETE_BEFORE, None, source(lsn=24023300, commit=24023290, tx=773),
                                     txinfo(1)), []),
    "orders_r": ({"id": 2}, envelope("r", None, row(2), source(lsn=24000000, commit=None, snapshot="first",
                                                              tx=760)), []),
    "orders_t": (None, envelope("t", None, None, source(lsn=24023400, commit=24023390, tx=774)), []),
    # primary key change 5 -> 6: delete(old key, newkey header), create(new key, oldkey header)
    "orders_pk_d": ({"id": 5}, envelope("d", row(5), None, source(lsn=24023500, commit=24023490, tx=775),
                                        txinfo(1)), [["__debezium.newkey", '{"id":6}']]),
    "orders_pk_c": ({"id": 6}, envelope("c", None, row(6), source(lsn=24023500, commit=24023490, tx=775),
                                        txinfo(2)), [["__debezium.oldkey", '{"id":5}']]),
}


def jsonconv(schema, payload, schemas):
    if payload is None:
        return None
    if not schemas:
        return dump(payload)
    return dump({"schema": schema, "payload": payload})


def write_record(dirname, name, topic, key, value, headers):
    rec = {"topic": topic, "partition": 0, "offset": 0, "headers": sum(headers, []),
           "key": key, "payload": value}
    write(f"{dirname}/{name}.json", json.dumps(rec, indent=1, ensure_ascii=False) + "\n")


def gen_json():
    topic = f"{P}.public.orders"
    for schemas, d in ((True, "json_schema"), (False, "json_plain")):
        for name, (k, v, h) in CHANGES.items():
            write_record(d, name, topic, jsonconv(key_schema(), k, schemas) if k is not None else None,
                         jsonconv(envelope_schema(), v, schemas), h)
        write_record(d, "orders_tombstone", topic, jsonconv(key_schema(), {"id": 7}, schemas), None, [])
        # message (op=m), topic <prefix>.message
        msg_schema = struct_([
            struct_(source_fields(), "io.debezium.connector.postgresql.Source", field="source"),
            prim("string", "op", optional=False), prim("int64", "ts_ms"), prim("int64", "ts_us"),
            prim("int64", "ts_ns"),
            struct_([prim("string", "prefix", optional=False), prim("bytes", "content", optional=False)],
                    "io.debezium.connector.postgresql.Message", field="message"),
        ], f"{P}.message.Envelope", version=1)
        msg = {"source": source(lsn=24023600, commit=24023590, tx=776, schema="", table=""), "op": "m",
               "ts_ms": 1700000000300, "ts_us": None, "ts_ns": None,
               "message": {"prefix": "audit", "content": b64(b"hello")}}
        mkey = struct_([prim("string", "prefix", optional=False)], f"{P}.message.Key")
        write_record(d, "message_m", f"{P}.message", jsonconv(mkey, {"prefix": "audit"}, schemas),
                     jsonconv(msg_schema, msg, schemas), [])
        # heartbeat
        hk = struct_([prim("string", "serverName", optional=False)], "io.debezium.connector.common.ServerNameKey")
        hv = struct_([prim("int64", "ts_ms", optional=False)], "io.debezium.connector.common.Heartbeat")
        write_record(d, "heartbeat", f"__debezium-heartbeat.{P}", jsonconv(hk, {"serverName": P}, schemas),
                     jsonconv(hv, {"ts_ms": 1700000000400}, schemas), [])
        # transaction metadata
        tk = struct_([prim("string", "id", optional=False)], "io.debezium.connector.common.TransactionMetadataKey")
        dc = struct_([prim("string", "data_collection", optional=False), prim("int64", "event_count", optional=False)],
                     "event.collection", version=1)
        tv = struct_([prim("string", "status", optional=False), prim("string", "id", optional=False),
                      prim("int64", "event_count"),
                      {"type": "array", "items": dc, "optional": True, "field": "data_collections"},
                      prim("int64", "ts_ms", optional=False)],
                     "io.debezium.connector.common.TransactionMetadataValue")
        write_record(d, "tx_begin", f"{P}.transaction", jsonconv(tk, {"id": "771:24023100"}, schemas),
                     jsonconv(tv, {"status": "BEGIN", "id": "771:24023100", "event_count": None,
                                   "data_collections": None, "ts_ms": 1700000000123}, schemas), [])
        write_record(d, "tx_end", f"{P}.transaction", jsonconv(tk, {"id": "771:24023130"}, schemas),
                     jsonconv(tv, {"status": "END", "id": "771:24023130", "event_count": 2,
                                   "data_collections": [{"data_collection": "public.orders", "event_count": 2}],
                                   "ts_ms": 1700000000123}, schemas), [])
        # flattened (ExtractNewRecordState, add.fields=op,lsn,source.ts_ms,source.ts_us,
        # source.sequence,table,db,schema,snapshot,txId; delete.tombstone.handling.mode=rewrite)
        fs = flat_schema(FLAT_EXTRA)
        def flat(r, op, deleted, lsn=24023128):
            r = dict(r)
            r.update({"__op": op, "__lsn": lsn, "__source_ts_ms": 1700000000123,
                      "__source_ts_us": 1700000000123456,
                      "__source_sequence": json.dumps(["24023119", str(lsn)], separators=(",", ":")),
                      "__table": "orders", "__db": "app", "__schema": "public", "__snapshot": "false",
                      "__txId": 771, "__deleted": deleted})
            return r
        write_record(d, "flat_rewrite_c", topic, jsonconv(key_schema(), {"id": 1}, schemas),
                     jsonconv(fs, flat(row(1), "c", "false"), schemas), [])
        write_record(d, "flat_rewrite_d", topic, jsonconv(key_schema(), {"id": 7}, schemas),
                     jsonconv(fs, flat(DELETE_BEFORE, "d", "true", 24023300), schemas), [])
        # tombstone mode (default): delete -> null value; no add.fields
        plain = fix_doc_order(struct_(row_fields(), f"{P}.public.orders.Value"))
        write_record(d, "flat_tombstone_u", topic, jsonconv(key_schema(), {"id": 1}, schemas),
                     jsonconv(plain, row(1, status="shipped"), schemas), [])
        write_record(d, "flat_tombstone_d", topic, jsonconv(key_schema(), {"id": 7}, schemas), None, [])
    return


# ---- Avro (Connect AvroData conventions) ----

def avro_of(s, ns_hint=None):
    """Connect schema (JSON form) -> Avro schema, as AvroData writes it."""
    t = s["type"]
    name = s.get("name")
    props = {}
    if s.get("version") is not None:
        props["connect.version"] = s["version"]
    if s.get("doc"):
        props["connect.doc"] = s["doc"]
    if s.get("parameters"):
        props["connect.parameters"] = s["parameters"]
    if "default" in s and s["default"] is not None:
        props["connect.default"] = s["default"]
    if t == "struct":
        full = name or "ConnectDefault"
        ns, _, short = full.rpartition(".")
        fields = []
        for f in s["fields"]:
            ft = avro_of(f)
            fd = {"name": f["field"], "type": ft}
            if f.get("optional"):
                if "default" in f and f["default"] is not None:
                    fd["type"] = [ft, "null"]
                    fd["default"] = f["default"]
                else:
                    fd["type"] = ["null", ft]
                    fd["default"] = None
            elif "default" in f and f["default"] is not None:
                fd["default"] = f["default"]
            fields.append(fd)
        out = {"type": "record", "name": short, "fields": fields}
        if ns:
            out = {"type": "record", "name": short, "namespace": ns, "fields": fields}
        out.update(props)
        out["connect.name"] = full
        return out
    if t == "array":
        items = avro_of(s["items"])
        if s["items"].get("optional"):
            items = ["null", items]
        return {"type": "array", "items": items, **props}
    if t == "map":
        vals = avro_of(s["values"])
        if s["values"].get("optional"):
            vals = ["null", vals]
        return {"type": "map", "values": vals, **props}
    prim_map = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float",
                "float64": "double", "float": "float", "double": "double", "boolean": "boolean",
                "string": "string", "bytes": "bytes"}
    out = {"type": prim_map[t]}
    if t in ("int8", "int16"):
        out["connect.type"] = t
    if name == "org.apache.kafka.connect.data.Decimal":
        out["scale"] = int(s["parameters"]["scale"])
        out["precision"] = int(s["parameters"].get("connect.decimal.precision", "64"))
        out.update(props)
        out["connect.name"] = name
        out["logicalType"] = "decimal"
        return out
    out.update(props)
    if name:
        out["connect.name"] = name
    if len(out) == 1:
        return prim_map[t]
    return out


def dedupe_named(avro, seen=None):
    """Avro forbids redefining a named type: replace repeats with their full name."""
    if seen is None:
        seen = set()
    if isinstance(avro, list):
        return [dedupe_named(a, seen) for a in avro]
    if not isinstance(avro, dict):
        return avro
    if avro.get("type") == "record":
        full = avro.get("namespace", "") + "." + avro["name"] if avro.get("namespace") else avro["name"]
        if full in seen:
            return full
        seen.add(full)
        avro = dict(avro)
        avro["fields"] = [dict(f, type=dedupe_named(f["type"], seen)) for f in avro["fields"]]
        return avro
    if avro.get("type") == "array":
        return dict(avro, items=dedupe_named(avro["items"], seen))
    if avro.get("type") == "map":
        return dict(avro, values=dedupe_named(avro["values"], seen))
    return avro


def avro_json_value(schema, v):
    """Value -> Avro JSON encoding (unions wrapped, bytes as latin-1 strings)."""
    if isinstance(schema, list):
        if v is None:
            return None
        branch = [b for b in schema if b != "null"][0]
        return {type_name(branch): avro_json_value(branch, v)}
    if isinstance(schema, str):
        t = schema
        if t in NAMED:
            return avro_json_value(NAMED[t], v)
    else:
        t = schema["type"]
    if t == "record":
        return {f["name"]: avro_json_value(f["type"], v.get(f["name"])) for f in schema["fields"]}
    if t == "array":
        return [avro_json_value(schema["items"], x) for x in v]
    if t == "map":
        return {k: avro_json_value(schema["values"], x) for k, x in v.items()}
    if t == "bytes":
        return base64.b64decode(v).decode("latin-1")
    return v


NAMED = {}


def collect_named(avro):
    if isinstance(avro, list):
        for a in avro:
            collect_named(a)
    elif isinstance(avro, dict):
        if avro.get("type") == "record":
            full = avro.get("namespace", "") + "." + avro["name"] if avro.get("namespace") else avro["name"]
            NAMED[full] = avro
            for f in avro["fields"]:
                collect_named(f["type"])
        elif avro.get("type") == "array":
            collect_named(avro["items"])
        elif avro.get("type") == "map":
            collect_named(avro["values"])


def type_name(s):
    if isinstance(s, str):
        return s
    if s["type"] == "record":
        return s.get("namespace", "") + "." + s["name"] if s.get("namespace") else s["name"]
    return s["type"]


def gen_avro():
    schemas = {
        "orders_key": key_schema(),
        "orders_envelope": envelope_schema(),
        "orders_flat": flat_schema(FLAT_EXTRA),
    }
    avsc = {}
    for n, s in schemas.items():
        a = dedupe_named(avro_of(s))
        avsc[n] = a
        write(f"avro/{n}.avsc", json.dumps(a, indent=1) + "\n")

    def enc(n, v):
        NAMED.clear()
        collect_named(avsc[n])
        return avro_json_value(avsc[n], v)
    cases = {}
    for name in ("orders_c", "orders_u", "orders_d", "orders_r", "orders_t"):
        k, v, _ = CHANGES[name]
        cases[name] = {"key_schema": "orders_key", "key": None if k is None else enc("orders_key", k),
                       "value_schema": "orders_envelope", "value": enc("orders_envelope", v)}
    flat = dict(row(1))
    flat.update({"__op": "c", "__lsn": 24023128, "__source_ts_ms": 1700000000123,
                 "__source_ts_us": 1700000000123456, "__source_sequence": "[\"24023119\",\"24023128\"]",
                 "__table": "orders", "__db": "app", "__schema": "public", "__snapshot": "false",
                 "__txId": 771, "__deleted": "false"})
    cases["flat_rewrite_c"] = {"key_schema": "orders_key", "key": enc("orders_key", {"id": 1}),
                               "value_schema": "orders_flat", "value": enc("orders_flat", flat)}
    write("avro/cases.json", json.dumps(cases, indent=1) + "\n")


def gen_bench():
    """~4 KB schema'd envelope, 20 columns of mixed types (benchmarks)."""
    cols = [
        prim("int32", "id", optional=False), prim("int64", "cust"), prim("string", "status"),
        prim("int16", "qty"),
        prim("bytes", "price", name="org.apache.kafka.connect.data.Decimal", version=1,
             params={"scale": "2", "connect.decimal.precision": "10"}),
        prim("float64", "ratio"), prim("boolean", "active"),
        prim("int64", "created", name="io.debezium.time.MicroTimestamp", version=1),
        prim("string", "updated", name="io.debezium.time.ZonedTimestamp", version=1),
        prim("int32", "day", name="io.debezium.time.Date", version=1),
        prim("string", "note"), prim("string", "email"), prim("string", "city"),
        prim("int64", "views"), prim("float32", "weight"), prim("bytes", "blob"),
        {"type": "array", "items": {"type": "string", "optional": True}, "optional": True, "field": "tags"},
        prim("string", "uid", name="io.debezium.data.Uuid", version=1),
        prim("int32", "rank"), prim("string", "country"),
    ]
    val = lambda f: struct_(cols, f"{P}.public.items.Value", optional=True, field=f)
    schema = struct_([val("before"), val("after"),
                      struct_(source_fields(), "io.debezium.connector.postgresql.Source", field="source"),
                      prim("string", "op", optional=False), prim("int64", "ts_ms"), prim("int64", "ts_us"),
                      prim("int64", "ts_ns"), tx_block()], f"{P}.public.items.Envelope", version=2)
    after = {"id": 42, "cust": 1234567890123, "status": "shipped", "qty": 7, "price": "BNI=", "ratio": 0.25,
             "active": True, "created": 1700000000123456, "updated": "2023-11-14T22:13:20.123456Z",
             "day": 19675, "note": "Leave the parcel at the back door, please. Thanks!",
             "email": "someone@example.com", "city": "K\u00f8benhavn", "views": 98765, "weight": 2.5,
             "blob": "AAECAwQFBgcICQ==", "tags": ["red", "large", None], "uid": "b68a35a7-17ad-35b3-af2a-ae46edb4545a",
             "rank": 3, "country": "DK"}
    after["city"] = "K\u00f8benhavn".encode().decode("unicode_escape")
    v = envelope("u", None, after, source(tx=772), txinfo(3))
    k = {"id": 42}
    kschema = struct_([prim("int32", "id", optional=False)], f"{P}.public.items.Key")
    write_record("bench", "items_u", f"{P}.public.items", jsonconv(kschema, k, True), jsonconv(schema, v, True), [])
    write_record("bench", "items_u_plain", f"{P}.public.items", jsonconv(kschema, k, False), jsonconv(schema, v, False), [])
    # Avro of the same
    a = dedupe_named(avro_of(schema))
    write("bench/items_envelope.avsc", json.dumps(a) + "\n")
    NAMED.clear()
    collect_named(a)
    write("bench/items_u.avro.json", json.dumps(avro_json_value(a, v)) + "\n")


if __name__ == "__main__":
    gen_json()
    gen_avro()
    gen_bench()
