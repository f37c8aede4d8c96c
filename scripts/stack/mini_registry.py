#!/usr/bin/env python3
"""A minimal schema registry for the native test stack (stdlib only, in-memory + a JSON file).

The native stack normally runs the real Apicurio Registry 2.4.2 (rebuilt from Maven Central jars,
see scripts/stack/README.md, "Schema registry"); CDC_SINK_REGISTRY_IMPL=mini runs this stand-in
instead (no JVM, no 130 MB build). It serves exactly the two API subsets the stack needs, with
Apicurio's id semantics:

* Apicurio Registry v2 REST API (``/apis/registry/v2``), the part used by the Apicurio 2.6
  Kafka Connect ``AvroConverter`` to auto-register schemas: create artifact (``ifExists`` =
  RETURN / RETURN_OR_UPDATE / UPDATE / FAIL), artifact and version metadata, content by
  ``globalId`` / ``contentId``, references (always empty).
* Confluent-compatible API (``/apis/ccompat/v7``, as Apicurio serves it), the part a Confluent
  client (srclient, confluent-kafka's SchemaRegistryClient) uses: ``/schemas/ids/{id}``,
  ``/subjects``, ``/subjects/{s}/versions[/{v}]``, register, lookup, ``/config``.

Ids follow Apicurio's defaults: every distinct content gets a ``contentId``; every artifact version
a ``globalId``; ccompat ``/schemas/ids/{id}`` takes a contentId (Apicurio's default, legacy-id-mode
off), which is also what the converter writes in the Confluent frame (``use-id=contentId``).
Subjects are artifact ids (TopicIdStrategy: ``<topic>-key`` / ``<topic>-value``) in group
``default``. No compatibility checks, no auth. For tests on 127.0.0.1 only.

Usage: mini_registry.py --port 8080 --state DIR/state.json [--log-requests]
"""
import argparse
import datetime
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

LOCK = threading.Lock()
STATE = {"contents": [], "artifacts": {}, "next_global": 1}
# contents: list of {"id": contentId, "content": str, "type": str}
# artifacts: "group/artifactId" -> {"group","id","type","created","versions":[{"version","globalId","contentId","created"}]}
STATE_FILE = None


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def save():
    if STATE_FILE:
        tmp = STATE_FILE + ".tmp"
        with open(tmp, "w") as f:
            json.dump(STATE, f)
        os.replace(tmp, STATE_FILE)


def content_id(content, typ):
    for c in STATE["contents"]:
        if c["content"] == content:
            return c["id"]
    cid = len(STATE["contents"]) + 1
    STATE["contents"].append({"id": cid, "content": content, "type": typ})
    return cid


def content_by_id(cid):
    if 1 <= cid <= len(STATE["contents"]):
        return STATE["contents"][cid - 1]
    return None


def norm_group(g):
    return "default" if g in (None, "", "null", "default") else g


def guess_type(content):
    try:
        j = json.loads(content)
    except ValueError:
        return "PROTOBUF"
    if isinstance(j, (dict, list, str)) and (not isinstance(j, dict) or "type" in j or "fields" in j):
        return "AVRO"
    return "JSON"


def add_version(group, aid, content, typ):
    key = group + "/" + aid
    art = STATE["artifacts"].get(key)
    if art is None:
        art = {"group": group, "id": aid, "type": typ, "created": now_iso(), "versions": []}
        STATE["artifacts"][key] = art
    cid = content_id(content, typ)
    v = {"version": str(len(art["versions"]) + 1), "globalId": STATE["next_global"], "contentId": cid,
         "created": now_iso()}
    STATE["next_global"] += 1
    art["versions"].append(v)
    save()
    return art, v


def find_version(art, content):
    for v in art["versions"]:
        if content_by_id(v["contentId"])["content"] == content:
            return v
    return None


def meta(art, v):
    return {"groupId": art["group"], "id": art["id"], "name": None, "description": None,
            "createdBy": "", "createdOn": art["created"], "modifiedBy": "", "modifiedOn": v["created"],
            "version": v["version"], "type": art["type"], "globalId": v["globalId"], "state": "ENABLED",
            "contentId": v["contentId"], "labels": [], "properties": {}, "references": []}


def get_version(art, ver):
    if ver in ("latest", "branch=latest", "-1"):
        return art["versions"][-1] if art["versions"] else None
    for v in art["versions"]:
        if v["version"] == ver:
            return v
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cdc-sink-mini-registry/1"
    log_requests = False

    def log_message(self, fmt, *args):
        if self.log_requests:
            super().log_message(fmt, *args)

    # ---------------------------------------------------------------- plumbing
    def send_json(self, code, obj, ctype="application/json"):
        body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def ccompat_error(self, http, code, msg):
        self.send_json(http, {"error_code": code, "message": msg}, "application/vnd.schemaregistry.v1+json")

    def v2_error(self, http, name, msg):
        self.send_json(http, {"error_code": http, "message": msg, "name": name, "detail": msg})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode() if n else ""

    def route(self, method):
        u = urlparse(self.path)
        self.q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        p = u.path.rstrip("/")
        with LOCK:
            m = re.match(r"^/apis/ccompat/v[67](/.*)?$", p)
            if m:
                return self.ccompat(method, m.group(1) or "/")
            m = re.match(r"^/apis/registry/v2(/.*)?$", p)
            if m:
                return self.v2(method, m.group(1) or "/")
            if p in ("", "/health", "/health/ready", "/health/live"):
                return self.send_json(200, {"status": "UP"})
        self.send_json(404, {"error_code": 404, "message": "not found: " + p})

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")

    # ---------------------------------------------------------------- ccompat v7
    def ccompat(self, method, p):
        arts = STATE["artifacts"]
        subj_art = lambda s: arts.get("default/" + s)  # noqa: E731
        parts = [unquote(x) for x in p.strip("/").split("/")] if p != "/" else []
        if method == "GET" and parts == ["subjects"]:
            return self.send_json(200, sorted(a["id"] for a in arts.values() if a["group"] == "default"))
        if method == "GET" and parts == ["schemas", "types"]:
            return self.send_json(200, ["AVRO", "JSON", "PROTOBUF"])
        if parts and parts[0] == "config":
            if method == "GET":
                return self.send_json(200, {"compatibilityLevel": "NONE"})
            return self.send_json(200, json.loads(self.body() or "{}"))
        if parts and parts[0] == "mode":
            return self.send_json(200, {"mode": "READWRITE"})
        if len(parts) >= 3 and parts[:2] == ["schemas", "ids"]:
            try:
                c = content_by_id(int(parts[2]))
            except ValueError:
                c = None
            if c is None:
                return self.ccompat_error(404, 40403, "Schema %s not found" % parts[2])
            if len(parts) == 3 and method == "GET":
                out = {"schema": c["content"], "references": []}
                if c["type"] != "AVRO":
                    out["schemaType"] = c["type"]
                return self.send_json(200, out)
            if parts[3:] == ["schema"]:
                return self.send_json(200, c["content"])
            if parts[3:] in (["versions"], ["subjects"]):
                hits = [(a, v) for a in arts.values() for v in a["versions"] if v["contentId"] == c["id"]]
                if parts[3] == "subjects":
                    return self.send_json(200, sorted({a["id"] for a, _ in hits}))
                return self.send_json(200, [{"subject": a["id"], "version": int(v["version"])} for a, v in hits])
        if len(parts) >= 2 and parts[0] == "subjects":
            s = parts[1]
            art = subj_art(s)
            if len(parts) == 2 and method == "POST":  # lookup
                if art is None:
                    return self.ccompat_error(404, 40401, "Subject '%s' not found." % s)
                req = json.loads(self.body() or "{}")
                v = find_version(art, req.get("schema", ""))
                if v is None:
                    return self.ccompat_error(404, 40403, "Schema not found")
                return self.send_json(200, {"subject": s, "version": int(v["version"]), "id": v["contentId"],
                                            "schema": req.get("schema")})
            if len(parts) == 2 and method == "DELETE":
                if art is None:
                    return self.ccompat_error(404, 40401, "Subject '%s' not found." % s)
                del arts["default/" + s]
                save()
                return self.send_json(200, [int(v["version"]) for v in art["versions"]])
            if len(parts) == 3 and parts[2] == "versions":
                if method == "POST":  # register
                    req = json.loads(self.body() or "{}")
                    schema = req.get("schema", "")
                    typ = req.get("schemaType") or "AVRO"
                    if art is not None:
                        v = find_version(art, schema)
                        if v is not None:
                            return self.send_json(200, {"id": v["contentId"]})
                    art, v = add_version("default", s, schema, typ)
                    return self.send_json(200, {"id": v["contentId"]})
                if art is None:
                    return self.ccompat_error(404, 40401, "Subject '%s' not found." % s)
                return self.send_json(200, [int(v["version"]) for v in art["versions"]])
            if len(parts) >= 4 and parts[2] == "versions":
                if art is None:
                    return self.ccompat_error(404, 40401, "Subject '%s' not found." % s)
                v = get_version(art, parts[3])
                if v is None:
                    return self.ccompat_error(404, 40402, "Version %s not found." % parts[3])
                c = content_by_id(v["contentId"])
                if parts[4:] == ["schema"]:
                    return self.send_json(200, c["content"])
                out = {"subject": s, "version": int(v["version"]), "id": v["contentId"], "schema": c["content"],
                       "references": []}
                if c["type"] != "AVRO":
                    out["schemaType"] = c["type"]
                return self.send_json(200, out)
        return self.ccompat_error(404, 40400, "unsupported by the mini registry: %s %s" % (method, p))

    # ---------------------------------------------------------------- Apicurio v2
    def v2(self, method, p):
        arts = STATE["artifacts"]
        parts = [unquote(x) for x in p.strip("/").split("/")] if p != "/" else []
        if parts == ["system", "info"]:
            return self.send_json(200, {"name": "cdc-sink mini registry", "version": "2.6-compatible-subset"})
        if len(parts) == 3 and parts[0] == "ids" and method == "GET":
            kind, ident = parts[1], int(parts[2])
            if kind == "contentIds":
                c = content_by_id(ident)
            elif kind == "globalIds":
                c = None
                for a in arts.values():
                    for v in a["versions"]:
                        if v["globalId"] == ident:
                            c = content_by_id(v["contentId"])
            elif kind == "contentHashes":
                c = None
            else:
                c = None
            if c is None:
                return self.v2_error(404, "ContentNotFoundException", "No content with id %s" % ident)
            return self.send_json(200, c["content"], "application/json")
        if len(parts) == 4 and parts[0] == "ids" and parts[3] == "references":
            return self.send_json(200, [])
        if len(parts) >= 3 and parts[0] == "groups" and parts[2] == "artifacts":
            group = norm_group(parts[1])
            if len(parts) == 3 and method == "POST":
                aid = self.headers.get("X-Registry-ArtifactId")
                typ = self.headers.get("X-Registry-ArtifactType") or None
                raw = self.body()
                ctype = self.headers.get("Content-Type", "")
                content = raw
                if "create.extended" in ctype:
                    content = json.loads(raw).get("content", "")
                if typ is None:
                    typ = guess_type(content)
                if not aid:
                    aid = "artifact-%d" % (len(arts) + 1)
                if_exists = self.q.get("ifExists", "FAIL")
                art = arts.get(group + "/" + aid)
                if art is not None:
                    if if_exists == "FAIL":
                        return self.v2_error(409, "ArtifactAlreadyExistsException",
                                             "An artifact with ID '%s' in group '%s' already exists." % (aid, group))
                    if if_exists in ("RETURN", "RETURN_OR_UPDATE", "FIND_OR_CREATE_VERSION"):
                        v = find_version(art, content) if if_exists != "RETURN" else art["versions"][-1]
                        if v is not None:
                            return self.send_json(200, meta(art, v))
                art, v = add_version(group, aid, content, typ)
                return self.send_json(200, meta(art, v))
            if len(parts) == 3 and method == "GET":
                hits = [a for a in arts.values() if a["group"] == group]
                return self.send_json(200, {"count": len(hits), "artifacts": [
                    {"groupId": a["group"], "id": a["id"], "type": a["type"], "state": "ENABLED"} for a in hits]})
            if len(parts) >= 4:
                aid = parts[3]
                art = arts.get(group + "/" + aid)
                if art is None:
                    return self.v2_error(404, "ArtifactNotFoundException",
                                         "No artifact with ID '%s' in group '%s' was found." % (aid, group))
                rest = parts[4:]
                if rest == [] and method == "GET":
                    c = content_by_id(art["versions"][-1]["contentId"])
                    return self.send_json(200, c["content"])
                if rest == [] and method == "PUT":
                    art, v = add_version(group, aid, self.body(), art["type"])
                    return self.send_json(200, meta(art, v))
                if rest == [] and method == "DELETE":
                    del arts[group + "/" + aid]
                    save()
                    self.send_response(204)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                if rest == ["meta"] and method == "GET":
                    return self.send_json(200, meta(art, art["versions"][-1]))
                if rest == ["meta"] and method == "POST":  # search version by content
                    raw = self.body()
                    content = raw
                    if "extended" in self.headers.get("Content-Type", ""):
                        content = json.loads(raw).get("content", "")
                    v = find_version(art, content)
                    if v is None:
                        return self.v2_error(404, "ArtifactNotFoundException", "No version with that content")
                    return self.send_json(200, meta(art, v))
                if rest == ["versions"] and method == "GET":
                    return self.send_json(200, {"count": len(art["versions"]), "versions": [
                        dict(meta(art, v), state="ENABLED") for v in art["versions"]]})
                if rest == ["versions"] and method == "POST":
                    art, v = add_version(group, aid, self.body(), art["type"])
                    return self.send_json(200, meta(art, v))
                if len(rest) >= 2 and rest[0] == "versions":
                    v = get_version(art, rest[1])
                    if v is None:
                        return self.v2_error(404, "VersionNotFoundException", "No version '%s'" % rest[1])
                    if rest[2:] == ["meta"]:
                        return self.send_json(200, meta(art, v))
                    if rest[2:] == ["references"]:
                        return self.send_json(200, [])
                    if rest[2:] == []:
                        return self.send_json(200, content_by_id(v["contentId"])["content"])
        return self.v2_error(404, "NotFoundException", "unsupported by the mini registry: %s %s" % (method, p))


def main():
    global STATE, STATE_FILE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--state", help="JSON file keeping schemas and ids across restarts")
    ap.add_argument("--log-requests", action="store_true")
    ap.add_argument("tags", nargs="*", help="ignored (lets the caller tag the process command line)")
    a = ap.parse_args()
    STATE_FILE = a.state
    if STATE_FILE and os.path.exists(STATE_FILE):
        with open(STATE_FILE) as f:
            STATE = json.load(f)
    Handler.log_requests = a.log_requests
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    print("mini registry listening on http://%s:%d (ccompat: /apis/ccompat/v7, Apicurio: /apis/registry/v2)"
          % (a.host, a.port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
