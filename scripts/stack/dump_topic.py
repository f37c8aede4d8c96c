#!/usr/bin/env python3
"""Dumps Kafka topics as kcat ``-C -J`` JSON lines, for binary (Avro) records too.

kcat prints record bytes as JSON strings, which mangles non-UTF-8 bytes. This writes the same
object shape as ``kcat -C -J``::

  {"topic":..,"partition":..,"offset":..,"tstype":"create"|"logappend"|"unknown","ts":..,
   "broker":..,"headers":[k1,v1,..],"key":..,"payload":..}

with ``key_b64`` / ``payload_b64`` (standard base64, null for null bytes) instead of ``key`` /
``payload`` when ``--binary`` is given. ``broker`` is the id of the partition leader from the
topic metadata (the broker the record was fetched from in a one-broker cluster). Header values
are decoded as UTF-8 (kcat does the same); null header values stay null.

Reads each partition from the beginning to its high watermark at start, then exits.
Needs confluent-kafka (the project venv: scripts/venv.sh).

Usage: dump_topic.py --bootstrap 127.0.0.1:9092 [--binary] TOPIC [TOPIC...] > out.jsonl
"""
import argparse
import base64
import json
import sys

from confluent_kafka import Consumer, TopicPartition, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--binary", action="store_true", help="write key_b64/payload_b64")
    ap.add_argument("topics", nargs="+")
    a = ap.parse_args()
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "cdc-sink-dump", "enable.auto.commit": False,
                  "enable.partition.eof": False, "auto.offset.reset": "earliest"})
    md = c.list_topics(timeout=10)
    out = sys.stdout
    for topic in a.topics:
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            print("no such topic: %s" % topic, file=sys.stderr)
            sys.exit(1)
        for pid in sorted(tmd.partitions):
            leader = tmd.partitions[pid].leader
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, pid), timeout=10)
            if hi <= lo:
                continue
            c.assign([TopicPartition(topic, pid, lo)])
            while True:
                m = c.poll(10)
                if m is None:
                    print("timeout reading %s[%d]" % (topic, pid), file=sys.stderr)
                    sys.exit(1)
                if m.error():
                    print("error: %s" % m.error(), file=sys.stderr)
                    sys.exit(1)
                tstype, ts = m.timestamp()
                rec = {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                       "tstype": {TIMESTAMP_CREATE_TIME: "create", TIMESTAMP_LOG_APPEND_TIME: "logappend"}.get(
                           tstype, "unknown"),
                       "ts": ts, "broker": leader}
                hdrs = m.headers()
                if hdrs:
                    flat = []
                    for k, v in hdrs:
                        flat += [k, None if v is None else v.decode("utf-8", "replace")]
                    rec["headers"] = flat
                k, v = m.key(), m.value()
                if a.binary:
                    rec["key_b64"] = None if k is None else base64.b64encode(k).decode()
                    rec["payload_b64"] = None if v is None else base64.b64encode(v).decode()
                else:
                    rec["key"] = None if k is None else k.decode("utf-8")
                    rec["payload"] = None if v is None else v.decode("utf-8")
                out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                if m.offset() + 1 >= hi:
                    break
    c.close()


if __name__ == "__main__":
    main()
