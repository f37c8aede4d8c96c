"""Writer schemas of Confluent-framed Avro values (magic byte 0, a 4-byte big-endian schema id,
the datum), from a registry's Confluent-compatible API: the one lookup both contenders make,
once per id they see."""
import json
import urllib.request


def writer_schema(registry, sid):
    """The Avro schema (JSON text) registered under id sid at registry (…/apis/ccompat/v7)."""
    with urllib.request.urlopen(f"{registry.rstrip('/')}/schemas/ids/{sid}", timeout=30) as r:
        return json.load(r)["schema"]
