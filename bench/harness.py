"""Benchmark harness: cdc-sink vs Spark (foreachBatch + MERGE) vs delta-rs (merge loop).

    harness.py run    --size 100000 --backlog 50000 --live 10000 --rate 1000 --batch 10000 --out DIR
    harness.py report --out DIR --mergebench FILE...   # results/<date>.md, .json, .png

`run` measures one table size. For each contender in turn (never concurrently), on its own
topic holding the same generated stream (bench/gen, same seed: identical bytes apart from the
produce-time stamps):
  1. produce the snapshot (S rows) and bootstrap the contender's table from it (not measured);
  2. produce the backlog (changes, as fast as possible) and let the contender drain it:
     sustained events/s, CPU-seconds per million events and bytes written per batch are taken
     between the first and the last batch commit of the backlog (start-up excluded);
  3. produce the live part at --rate records/s while the contender keeps up: end-to-end latency
     per record = Delta commit visible (log file mtime, or the contender's own post-commit
     clock) minus the record's source.ts_us (stamped with the wall clock at produce time);
  4. stop it once it covered the last offset.
CPU and RSS come from /proc of the contender's process tree, sampled every 0.5 s; the load
average is recorded at every phase. Then the correctness gate: the three tables read through
delta-rs (live rows by key, business columns) must be equal to each other and to
dbzgen's Expected().
"""
import argparse
import base64
import datetime as dt
import decimal
import glob
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
EPOCH_D = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def say(*a):
    print(f"[bench {time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def loadavg():
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


# ------------------------------------------------------------------ /proc sampling
def tree(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def usage(pids):
    cpu = rss = 0
    for p in pids:
        try:
            f = open(f"/proc/{p}/stat").read()
            fs = f[f.rindex(")") + 2:].split()
            # utime stime cutime cstime: children reaped by the tree are counted through c*
            cpu += sum(int(x) for x in fs[11:15])
            rss += int(open(f"/proc/{p}/statm").read().split()[1]) * PAGE
        except (OSError, IndexError):
            pass
    return cpu / TICK, rss


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.halt = pid, [], False

    def run(self):
        while not self.halt:
            pids = tree(self.pid)
            if not os.path.exists(f"/proc/{self.pid}"):
                break
            c, r = usage(pids)
            self.samples.append((time.time(), c, r))
            time.sleep(0.5)

    def cpu_at(self, t):
        best = None
        for s in self.samples:
            if s[0] <= t:
                best = s
        return (best or self.samples[0])[1]

    def peak_rss(self, t0=0):
        return max((s[2] for s in self.samples if s[0] >= t0), default=0)


# ------------------------------------------------------------------ helpers
def gen_cmd(a, topic, *extra):
    return [os.path.join(a.bin, "gen"), "-brokers", a.brokers, "-topic", topic, "-format", a.format,
            "-seed", str(a.seed), "-snapshot-rows", str(a.size), "-events", str(a.backlog + a.live),
            "-partitions", str(a.partitions), "-row-width", str(a.row_width), "-duplicates", str(a.duplicates),
            "-late", str(a.late), "-late-distance", str(a.late_distance),
            *(["-registry", a.registry] if a.format == "avro" else []),
            # consistency: transaction needs the transaction topic's END records
            *(["-tx-topic", topic + ".transaction"] if getattr(a, "consistency", "eventual") == "transaction" else []),
            # the change part is generated once per run and cached: re-simulating a 10M-row
            # snapshot for every phase would cost minutes and GBs each time
            *(["-changes-file", a.changes_file] if getattr(a, "changes_file", None) else []), *extra]


def sh(cmd, **kw):
    say("$", " ".join(cmd) if isinstance(cmd, list) else cmd)
    subprocess.run(cmd, check=True, **kw)


def read_offsets(path):
    recs = []
    with open(path) as f:
        for line in f:
            p, o, t = line.split()
            recs.append((int(p), int(o), int(t)))
    return recs


def ends(recs):
    e = {}
    for p, o, _ in recs:
        e[str(p)] = max(e.get(str(p), 0), o + 1)
    return e


def covered(offs, want):
    return all(int(offs.get(p, 0)) >= o for p, o in want.items())


def delta_commits(table):
    """[(version, mtime, actions)] of the table's JSON commits, in version order."""
    out = []
    for f in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        v = int(os.path.basename(f).split(".")[0])
        acts = [json.loads(l) for l in open(f) if l.strip()]
        out.append((v, os.stat(f).st_mtime, acts, os.path.getsize(f)))
    return out


def cdc_progress(table, sink, topic):
    """cdc-sink commits as progress records: offsets from txn(appId=<sink>/<topic>/<p>)."""
    res, offs = [], {}
    pref = f"{sink}/{topic}/"
    for v, mt, acts, _ in delta_commits(table):
        got = False
        for a in acts:
            t = a.get("txn")
            if t and t["appId"].startswith(pref):
                offs[t["appId"][len(pref):]] = t["version"]
                got = True
        if got:
            res.append({"version": v, "t_end": mt, "offsets": dict(offs)})
    return res


def file_progress(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip()]


def bytes_per_commit(table, versions):
    """Bytes each commit wrote: new data files + new deletion-vector files + the commit JSON."""
    seen, dvs, out = set(), set(), {}
    for v, _, acts, size in delta_commits(table):
        b = size
        for a in acts:
            ad = a.get("add")
            if not ad:
                continue
            if ad["path"] not in seen:
                seen.add(ad["path"])
                b += ad.get("size", 0)
            dv = ad.get("deletionVector")
            if dv and dv.get("storageType") == "u":
                k = (dv["pathOrInlineDv"], dv.get("offset"))
                if k not in dvs:
                    dvs.add(k)
                    b += dv.get("sizeInBytes", 0)
        out[v] = b
    return [out[v] for v in versions if v in out]


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ------------------------------------------------------------------ one contender
def run_contender(a, name, runid):
    topic = f"bench.{runid}.{name}"
    work = os.path.join(a.work, runid, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    table = os.path.join(work, "table")
    offs_file = os.path.join(work, "produced.txt")
    res = {"contender": name, "topic": topic, "table": table, "load_avg": {}, "consistency": a.consistency}
    say(f"== {name}: topic {topic}")
    res["load_avg"]["start"] = loadavg()
    sh(gen_cmd(a, topic, "-part", "snapshot", "-offsets", offs_file))
    snap_end = ends(read_offsets(offs_file))
    sink = f"bench-{runid}"
    logf = open(os.path.join(work, "contender.log"), "w")
    t_boot = time.time()
    if name == "cdc-sink":
        sh([os.path.join(a.bin, "cdc-sink"), "replay", "--topics", topic, "--brokers", a.brokers,
            "--starting", "earliest", "--table", table, "--sink-name", sink, "--batch-records", "200000", "--batch-bytes", "256MiB",
            "--quiet", "--quarantine-file", os.path.join(work, "quarantine.jsonl"),
            *(["--registry", a.registry] if a.format == "avro" else [])], stdout=logf, stderr=logf)
        res["bootstrap_seconds"] = time.time() - t_boot
        cfg = os.path.join(work, "cdc-sink.yaml")
        with open(cfg, "w") as f:
            json.dump({"sink": sink, "kafka": {"brokers": [a.brokers], "group": f"bench.{runid}.cdc", "topics": [topic]},
                       "tables": {"map": {topic: table}},
                       **({"consistency": "transaction", "transactions": {"topic": topic + ".transaction"}}
                          if a.consistency == "transaction" else {}),
                       "batch": {"max_records": a.batch, "max_interval": f"{int(a.max_interval*1000)}ms"},
                       "quarantine": {"file": os.path.join(work, "quarantine.jsonl")},
                       **({"registry": {"url": a.registry}} if a.format == "avro" else {}),
                       "http": {"listen": f"127.0.0.1:{free_port()}"}, "log": {"level": "warn", "format": "text"}}, f)
        say(f"cdc-sink bootstrapped in {res['bootstrap_seconds']:.1f}s")
        sh(gen_cmd(a, topic, "-part", "changes", "-to", str(a.split), "-offsets", offs_file))
        t_go = time.time()
        proc = subprocess.Popen([os.path.join(a.bin, "cdc-sink"), "run", "--config", cfg], stdout=logf, stderr=logf)
        progress = lambda: cdc_progress(table, sink, topic)
    else:
        script = os.path.join(HERE, "contenders", "spark_sink.py" if name == "spark" else "deltars_sink.py")
        cmd = [PY, script, "--brokers", a.brokers, "--topic", topic, "--table", table, "--work", work,
               "--batch", str(a.batch), "--format", a.format, *(["--registry", a.registry] if a.format == "avro" else [])]
        if name == "delta-rs":
            cmd += ["--max-interval", str(a.max_interval), "--group", f"bench.{runid}.deltars"]
        else:
            cmd += ["--partitions", str(a.partitions)]
        say("$", " ".join(cmd))
        proc = subprocess.Popen(cmd, stdout=logf, stderr=logf, start_new_session=True)
        pfile = os.path.join(work, "progress.jsonl")
        while not any(r.get("bootstrap") for r in file_progress(pfile)):
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited during bootstrap, see {work}/contender.log")
            time.sleep(0.5)
        res["bootstrap_seconds"] = [r for r in file_progress(pfile) if r.get("bootstrap")][0]["seconds"]
        say(f"{name} bootstrapped in {res['bootstrap_seconds']:.1f}s")
        sh(gen_cmd(a, topic, "-part", "changes", "-to", str(a.split), "-offsets", offs_file))
        t_go = time.time()
        open(os.path.join(work, "go"), "w").close()
        progress = lambda: [r for r in file_progress(pfile) if not r.get("bootstrap")]
    sampler = Sampler(proc.pid)
    sampler.start()
    res["load_avg"]["backlog_start"] = loadavg()
    backlog_end = ends(read_offsets(offs_file))

    def wait_cover(want, deadline):
        while True:
            pr = progress()
            if pr and covered(pr[-1]["offsets"], want):
                return pr
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited early (rc {proc.returncode}), see {work}/contender.log")
            if time.time() > deadline:
                raise SystemExit(f"{name}: timeout waiting for offsets {want}")
            time.sleep(0.25)

    wait_cover(backlog_end, time.time() + a.timeout)
    res["load_avg"]["backlog_end"] = loadavg()
    say(f"{name}: backlog drained; live phase at {a.rate}/s")
    live_from = len(read_offsets(offs_file))
    res["load_avg"]["live_start"] = loadavg()
    sh(gen_cmd(a, topic, "-part", "changes", "-from", str(a.split), "-rate", str(a.rate), "-offsets", offs_file))
    recs = read_offsets(offs_file)
    final_end = ends(recs)
    with open(os.path.join(work, "stop"), "w") as f:
        json.dump(final_end, f)
    pr = wait_cover(final_end, time.time() + a.timeout)
    res["load_avg"]["live_end"] = loadavg()
    t_done = time.time()
    if name == "cdc-sink":
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL) if name != "cdc-sink" else proc.kill()
        proc.wait()
    sampler.halt = True
    sampler.join()
    logf.close()

    # ---- figures
    def tot(o):
        return sum(int(v) for v in o.values())

    snap_n = tot(snap_end)
    bl = [r for r in pr if tot(r["offsets"]) <= tot(backlog_end) and tot(r["offsets"]) > snap_n]
    # first batch commit is excluded as the start of the window (start-up), so k >= 2 needed
    if len(bl) >= 2:
        t1, tk = bl[0]["t_end"], bl[-1]["t_end"]
        n = tot(bl[-1]["offsets"]) - tot(bl[0]["offsets"])
        res["throughput_eps"] = n / (tk - t1) if tk > t1 else None
        res["cpu_s_per_million"] = (sampler.cpu_at(tk) - sampler.cpu_at(t1)) / n * 1e6 if n else None
        res["backlog_window"] = {"records": n, "seconds": tk - t1, "batches": len(bl) - 1}
    res["backlog_records"] = tot(backlog_end) - snap_n
    res["backlog_batches"] = len(bl)
    res["backlog_wall_seconds_from_start"] = (bl[-1]["t_end"] - t_go) if bl else None
    res["peak_rss_mib"] = sampler.peak_rss(t_go) / 2**20
    res["cpu_s_total_after_bootstrap"] = sampler.samples[-1][1] - sampler.cpu_at(t_go) if sampler.samples else None
    # bytes per batch over the backlog batches
    if name == "cdc-sink":
        vers = [r["version"] for r in bl[1:]]
    else:
        vers = [r["version"] for r in bl[1:] if "version" in r]
        if not vers:  # spark: versions from the log, matched by order (one commit per batch)
            allv = [v for v, _, acts, _ in delta_commits(table) if any("commitInfo" in x and x["commitInfo"].get("operation") == "MERGE" for x in acts)]
            vers = allv[1:len(bl)]
    bpc = bytes_per_commit(table, vers)
    res["bytes_per_batch"] = {"median": pct(bpc, 0.5), "mean": sum(bpc) / len(bpc) if bpc else None, "n": len(bpc)}
    # latency of the live records
    lat = []
    live = recs[live_from:]
    commits = [(r["t_end"], {int(p): int(o) for p, o in r["offsets"].items()}) for r in pr]
    ci = 0
    for p, o, ts in sorted(live, key=lambda x: x[2]):
        # first commit covering (p, o): commits are monotone in offsets
        j = ci
        while j < len(commits) and commits[j][1].get(p, 0) <= o:
            j += 1
        if j < len(commits):
            lat.append(commits[j][0] - ts / 1e6)
    res["latency_s"] = {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "max": max(lat) if lat else None, "n": len(lat)}
    res["live_records"] = len(live)
    res["live_batches"] = len([r for r in pr if tot(r["offsets"]) > tot(backlog_end)])
    res["total_seconds"] = t_done - t_boot
    say(f"{name}: {json.dumps({k: res.get(k) for k in ('throughput_eps', 'cpu_s_per_million', 'peak_rss_mib', 'latency_s', 'bytes_per_batch')})}")
    return res


# ------------------------------------------------------------------ correctness gate
# The gate must work at 10M rows on a 24 GiB machine, so no table is ever held as Python
# objects: each table is read batch by batch, every column is brought to one canonical Arrow
# type (the same for the three writers and for dbzgen's Expected()), and each row is reduced
# to (id, deleted, digest of the business columns, digest of _cdc_source_version) by DuckDB's
# hash(). Tables are then compared as sorted numpy arrays. Rows of differing keys are fetched
# again for the report.
BUSINESS = ["id", "customer_id", "status", "amount", "created_at", "updated_at", "ship_date", "payload",
            "tags", "note", "uuid", "paid", "filler"]


def _amount_text(v):
    """Schemaless JSON: cdc-sink keeps Debezium's Decimal as its base64 text (docs/types.md)."""
    if v is None:
        return None
    n = int.from_bytes(base64.b64decode(v), "big", signed=True)
    return f"{decimal.Decimal(n).scaleb(-2):.2f}"


def _iso_micros(v):
    """Schemaless JSON: ZonedTimestamp stays ISO text in cdc-sink's table."""
    if v is None:
        return None
    d = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    return (d - EPOCH) // dt.timedelta(microseconds=1)


def canon_column(name, col, wire=True):
    """One column of any writer's table -> its canonical Arrow array. wire: text amounts are
    Debezium's base64 Decimal (a table); otherwise they are already decimal text (Expected())."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if name in ("id", "customer_id", "created_at", "updated_at", "ship_date"):
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            if name != "created_at":
                raise ValueError(f"column {name}: unexpected text type {t}")
            return pa.array([_iso_micros(x) for x in col.cast(pa.string()).to_pylist()], pa.int64())
        if pa.types.is_timestamp(t):
            return col.cast(pa.timestamp("us", tz=t.tz), safe=False).cast(pa.int64())
        if pa.types.is_date32(t):
            return col.cast(pa.int32()).cast(pa.int64())
        return col.cast(pa.int64())
    if name == "amount":
        if pa.types.is_decimal(t):
            return pc.cast(col.cast(pa.decimal128(38, 2)), pa.string())
        if not wire:
            return col.cast(pa.string())
        return pa.array([_amount_text(x) for x in col.cast(pa.string()).to_pylist()], pa.string())
    if name == "tags":
        return col.cast(pa.list_(pa.string()))
    if name in ("paid", "deleted"):
        return col.cast(pa.bool_())
    return col.cast(pa.string())


def digest_batches(batches, wire=True):
    """Record batches with BUSINESS + deleted + version -> sorted numpy arrays (id, deleted, h, vh)."""
    import duckdb
    import numpy as np
    import pyarrow as pa
    con = duckdb.connect()
    cols = ", ".join(f'"{c}"' for c in BUSINESS[1:])
    parts = []
    for rb in batches:
        if rb.num_rows == 0:
            continue
        c = pa.table({n: canon_column(n, rb.column(n), wire) for n in BUSINESS + ["deleted"]}
                     | {"version": rb.column("version").cast(pa.string())})
        con.register("c", c)
        parts.append(con.execute(f"SELECT id, deleted, hash({cols}) AS h, hash(version) AS vh FROM c").to_arrow_table())
        con.unregister("c")
    if not parts:
        return {k: np.array([], dtype=d) for k, d in (("id", np.int64), ("deleted", bool), ("h", np.uint64), ("vh", np.uint64))}
    t = pa.concat_tables(parts)
    order = np.argsort(t.column("id").to_numpy(), kind="stable")
    out = {k: t.column(k).to_numpy()[order] for k in ("id", "deleted", "h", "vh")}
    if len(out["id"]) > 1 and (np.diff(out["id"]) == 0).any():
        dup = out["id"][1:][np.diff(out["id"]) == 0][:3]
        raise SystemExit(f"gate: duplicate keys in a table, e.g. {dup.tolist()}")
    return out


TABLE_SQL = ", ".join(BUSINESS) + ", _cdc_deleted AS deleted, _cdc_source_version AS version"


def table_batches(path, where=""):
    from deltalake import DeltaTable, QueryBuilder
    import pyarrow as pa
    q = QueryBuilder().register("t", DeltaTable(path)).execute(f"SELECT {TABLE_SQL} FROM t {where}")
    return iter(pa.RecordBatchReader.from_stream(q))  # deltalake hands out arro3 objects


def expected_batches(path):
    """dbzgen Expected() JSON lines -> record batches in the table layout."""
    import pyarrow as pa
    import pyarrow.json as pj
    row = pa.struct([("id", pa.int64()), ("customer_id", pa.int64()), ("status", pa.string()), ("amount", pa.string()),
                     ("created_at", pa.int64()), ("updated_at", pa.int64()), ("ship_date", pa.int64()),
                     ("payload", pa.string()), ("tags", pa.list_(pa.string())), ("note", pa.string()),
                     ("uuid", pa.string()), ("paid", pa.bool_()), ("filler", pa.string())])
    schema = pa.schema([("id", pa.int64()), ("deleted", pa.bool_()), ("row", row)])
    rd = pj.open_json(path, read_options=pj.ReadOptions(block_size=16 << 20),
                      parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    for rb in rd:
        r = rb.column("row")
        cols = {n: r.field(n) for n in BUSINESS[1:]}
        yield pa.RecordBatch.from_pydict({"id": rb.column("id"), **cols, "deleted": rb.column("deleted"),
                                          "version": pa.nulls(rb.num_rows, pa.string())})


def live_diff(x, y):
    """Keys whose live row differs between digests x and y (present in one only, or other digest)."""
    import numpy as np
    xl, yl = ~x["deleted"], ~y["deleted"]
    xi, yi = x["id"][xl], y["id"][yl]
    only = np.setxor1d(xi, yi, assume_unique=True)
    both, ix, iy = np.intersect1d(xi, yi, assume_unique=True, return_indices=True)
    changed = both[x["h"][xl][ix] != y["h"][yl][iy]]
    return np.union1d(only, changed)


def versions_equal(x, y):
    import numpy as np
    return bool(np.array_equal(x["id"], y["id"]) and np.array_equal(x["vh"], y["vh"]))


def sample_rows(batches, ids, wire=True):
    out = {}
    for rb in batches:
        t = {n: canon_column(n, rb.column(n), wire).to_pylist() for n in BUSINESS + ["deleted"]}
        for i, k in enumerate(t["id"]):
            if k in ids:
                out[k] = None if t["deleted"][i] else {n: t[n][i] for n in BUSINESS}
    return out


def gate(a, results, runid):
    exp_file = os.path.join(a.work, runid, "expected.jsonl")
    sh(gen_cmd(a, "unused", "-expected", exp_file))
    t0 = time.time()
    exp = digest_batches(expected_batches(exp_file), wire=False)
    out = {"expected_live": int((~exp["deleted"]).sum()), "expected_deleted": int(exp["deleted"].sum()), "tables": {}}
    digests = {}
    for r in results:
        d = digest_batches(table_batches(r["table"]))
        digests[r["contender"]] = d
        diff = live_diff(d, exp)
        q = os.path.join(os.path.dirname(r["table"]), "quarantine.jsonl")
        quarantined = [json.loads(l) for l in open(q)] if os.path.exists(q) else []
        sample = []
        if len(diff):
            ids = [int(k) for k in diff[:2]]
            got = sample_rows(table_batches(r["table"], f"WHERE id IN ({', '.join(map(str, ids))})"), set(ids))
            want = sample_rows(expected_batches(exp_file), set(ids), wire=False)
            sample = [{"id": k, "table": got.get(k), "expected": want.get(k)} for k in ids]
        out["tables"][r["contender"]] = {"live": int((~d["deleted"]).sum()), "tombstones": int(d["deleted"].sum()),
                                         "quarantined": [{"partition": x["partition"], "offset": x["offset"], "key": x.get("key"),
                                                          "error": x.get("error", {}).get("message")} for x in quarantined[:5]],
                                         "quarantined_count": len(quarantined),
                                         "equal_to_expected": len(diff) == 0, "diff_keys": int(len(diff)),
                                         "diff_sample": sample}
        say(f"gate: {r['contender']} read and compared ({time.time() - t0:.0f}s so far)")
    names = list(digests)
    pairs = {}
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            x, y = digests[names[i]], digests[names[j]]
            pairs[f"{names[i]} = {names[j]}"] = {"live_rows_equal": len(live_diff(x, y)) == 0,
                                                 "source_versions_equal": versions_equal(x, y)}
    out["pairs"] = pairs
    out["seconds"] = time.time() - t0
    out["pass"] = all(t["equal_to_expected"] for t in out["tables"].values()) and all(p["live_rows_equal"] for p in pairs.values())
    return out


# ------------------------------------------------------------------ commands
def build(a):
    os.makedirs(a.bin, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="1")
    sh(["go", "build", "-trimpath", "-o", os.path.join(a.bin, "gen"), "./bench/gen"], cwd=REPO, env=env)
    sh(["go", "build", "-trimpath", "-o", os.path.join(a.bin, "cdc-sink"), "./cmd/cdc-sink"], cwd=REPO, env=env)
    sh(["go", "build", "-trimpath", "-o", os.path.join(a.bin, "mergebench"), "./bench/mergebench"], cwd=REPO, env=env)


def cmd_run(a):
    if not a.no_build:
        build(a)
    runid = a.runid or f"{time.strftime('%m%d%H%M%S')}-{a.size}"
    os.makedirs(os.path.join(a.work, runid), exist_ok=True)
    stats_file = os.path.join(a.work, runid, "stream.json")
    a.changes_file = os.path.join(a.work, runid, "changes.jsonl")
    sh(gen_cmd(a, "unused", "-stats", stats_file, "-expected", os.devnull))
    stats = json.load(open(stats_file))
    a.split = int(stats["change_records"] * a.backlog / (a.backlog + a.live))
    if a.consistency == "transaction":
        # the backlog ends with a whole transaction (its END): with the gate, a transaction cut
        # in two would hold the backlog's last records back until the live part came
        with open(a.changes_file) as f:
            for i, line in enumerate(f):
                if i >= a.split and '"topic":"dbzgen.transaction-end"' in line:
                    a.split = i + 1
                    break
    out = {"runid": runid, "seed": a.seed, "size": a.size, "backlog_events": a.backlog, "live_events": a.live, "rate": a.rate,
           "batch": a.batch, "max_interval_s": a.max_interval, "format": a.format, "partitions": a.partitions,
           "consistency": a.consistency,
           "row_width": a.row_width, "duplicates": a.duplicates, "late": a.late, "late_distance": a.late_distance,
           "stream": {k: stats[k] for k in ("counts", "snapshot_records", "change_records", "avg_record_bytes")},
           "backlog_change_records": a.split, "started": dt.datetime.now(dt.timezone.utc).isoformat(),
           "nproc": os.cpu_count(), "results": []}
    os.makedirs(a.out, exist_ok=True)
    raw = os.path.join(a.out, f"run-{runid}.json")
    for name in a.contenders.split(","):
        out["results"].append(run_contender(a, name, runid))
        with open(raw, "w") as f:  # measurements first: a gate crash must not lose them
            json.dump(out, f, indent=2)
    out["gate"] = gate(a, out["results"], runid)
    out["finished"] = dt.datetime.now(dt.timezone.utc).isoformat()
    say("gate:", json.dumps({k: v for k, v in out["gate"].items() if k != "tables"}),
        {k: (v["equal_to_expected"], v["diff_keys"]) for k, v in out["gate"]["tables"].items()})
    with open(raw, "w") as f:
        json.dump(out, f, indent=2)
    if not a.keep:
        shutil.rmtree(os.path.join(a.work, runid), ignore_errors=True)
    if not out["gate"]["pass"]:
        raise SystemExit("correctness gate FAILED")


def cmd_regate(a):
    """Re-run the correctness gate of a kept run (harness.py run --keep) and update its file."""
    f = a.run_file
    out = json.load(open(f))
    for k in ("format", "partitions", "row_width", "duplicates", "late", "late_distance"):
        setattr(a, k, out[k])
    a.size, a.backlog, a.live = out["size"], out["backlog_events"], out["live_events"]
    a.seed = out.get("seed", a.seed)
    out["gate"] = gate(a, out["results"], out["runid"])
    say("gate:", json.dumps({k: v for k, v in out["gate"].items() if k != "tables"}),
        {k: (v["equal_to_expected"], v["diff_keys"]) for k, v in out["gate"]["tables"].items()})
    with open(f, "w") as fh:
        json.dump(out, fh, indent=2)
    if not out["gate"]["pass"]:
        raise SystemExit("correctness gate FAILED")


def cmd_mergebench(a):
    if not a.no_build:
        build(a)
    os.makedirs(a.out, exist_ok=True)
    for rows in a.sizes.split(","):
        la0 = loadavg()
        t0 = time.time()
        r = subprocess.run([os.path.join(a.bin, "mergebench"), "-rows", rows, "-batches", str(a.batches),
                            "-batch", str(a.batch)], check=True, capture_output=True, text=True)
        res = json.loads(r.stdout)
        res["load_avg_start"], res["load_avg_end"], res["wall_seconds"] = la0, loadavg(), time.time() - t0
        say("mergebench", rows, json.dumps(res))
        with open(os.path.join(a.out, f"mergebench-{rows}.json"), "w") as f:
            json.dump(res, f, indent=2)


# ------------------------------------------------------------------ scale-out
def metrics_of(addr):
    """Prometheus text of one instance's /metrics → {(name, labels): value} for the series used."""
    import urllib.request
    out = {}
    for line in urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode().splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, val = line.rsplit(" ", 1)
        out[name] = float(val)
    return out


def msum(ms, prefix, must=""):
    return sum(v for k, v in ms.items() if k.split("{")[0] == prefix and must in k)


def cmd_scaleout(a):
    """Several instances of one sink on one table (docs/scaling.md): the same stream (snapshot
    bootstrapped, then a backlog of changes) drained by 1, 2, … instances of one sink in one
    consumer group, partition-aligned layout. CPU-s per million events over all instances'
    processes, re-plans and rebases per commit, keys indexed per instance; the gate checks every
    table against Expected()."""
    if not a.no_build:
        build(a)
    a.live, a.rate = 0, 0
    runid = a.runid or f"{time.strftime('%m%d%H%M%S')}-scale-{a.size}"
    base = os.path.join(a.work, runid)
    os.makedirs(base, exist_ok=True)
    stats_file = os.path.join(base, "stream.json")
    a.changes_file = os.path.join(base, "changes.jsonl")
    sh(gen_cmd(a, "unused", "-stats", stats_file, "-expected", os.devnull))
    stats = json.load(open(stats_file))
    a.split = stats["change_records"]
    sink = f"bench-{runid}"
    out = {"runid": runid, "seed": a.seed, "size": a.size, "backlog_events": a.backlog, "batch": a.batch,
           "layout": a.layout, "max_interval_s": a.max_interval, "format": a.format, "partitions": a.partitions, "row_width": a.row_width,
           "duplicates": a.duplicates, "late": a.late, "late_distance": a.late_distance,
           "stream": {k: stats[k] for k in ("counts", "snapshot_records", "change_records", "avg_record_bytes")},
           "started": dt.datetime.now(dt.timezone.utc).isoformat(), "nproc": os.cpu_count(), "results": []}

    def config(work, topic, group, inst, listen):
        cfg = os.path.join(work, f"cdc-sink-{inst}.yaml")
        with open(cfg, "w") as f:
            json.dump({"sink": sink, "instance_id": inst,
                       # the instances are held with SIGSTOP while the backlog is produced
                       "kafka": {"brokers": [a.brokers], "group": group, "topics": [topic],
                                 "properties": {"session.timeout.ms": "600000", "max.poll.interval.ms": "900000"}},
                       "tables": {"map": {topic: os.path.join(work, "table")}, "layout": a.layout},
                       "batch": {"max_records": a.batch, "max_interval": f"{int(a.max_interval * 1000)}ms"},
                       "quarantine": {"file": os.path.join(work, "quarantine.jsonl")},
                       "http": {"listen": listen, "pprof": a.pprof}, "log": {"level": "info", "format": "json"}}, f)
        return cfg

    os.makedirs(a.out, exist_ok=True)
    raw = os.path.join(a.out, f"scaleout-{runid}.json")
    for n in [int(x) for x in a.instances.split(",")]:
        # Each n on its own topic with the same stream (same seed): Kafka hands a new group's
        # partitions to its first member at once, so the instances must all own partitions
        # before the backlog exists. Snapshot and bootstrap (aligned: one file per partition
        # per batch) are not measured.
        topic = f"bench.{runid}.n{n}"
        work = os.path.join(base, f"n{n}")
        os.makedirs(work)
        table = os.path.join(work, "table")
        offs_file = os.path.join(work, "produced.txt")
        say(f"== {n} instance(s): topic {topic}")
        sh(gen_cmd(a, topic, "-part", "snapshot", "-offsets", offs_file))
        snap_n = sum(ends(read_offsets(offs_file)).values())
        t0 = time.time()
        with open(os.path.join(work, "replay.log"), "w") as logf:
            sh([os.path.join(a.bin, "cdc-sink"), "replay", "--config", config(work, topic, "unused", "boot", ""), "--topics", topic,
                "--brokers", a.brokers, "--starting", "earliest", "--sink-name", sink, "--batch-records", "200000", "--batch-bytes", "256MiB", "--quiet"],
               stdout=logf, stderr=logf)
        boot_s = time.time() - t0
        say(f"bootstrapped {a.size} rows in {boot_s:.1f}s")
        procs, addrs, logs = [], [], []
        for i in range(n):
            addrs.append(f"127.0.0.1:{free_port()}")
            logs.append(os.path.join(work, f"i{i}.log"))
            logf = open(logs[-1], "w")
            procs.append(subprocess.Popen([os.path.join(a.bin, "cdc-sink"), "run", "--config",
                                           config(work, topic, f"bench.{runid}.n{n}", f"i{i}", addrs[-1])], stdout=logf, stderr=logf))

        def owned(path):
            lg = open(path).read()
            return lg.count('"msg":"partition assigned"') - lg.count('"msg":"partition revoked"')
        # every instance owns partitions (the group settled, each opened its table) before the
        # backlog exists; then all are stopped while it is produced and resumed together, so the
        # drain is measured with all n sharing it from the first record
        deadline = time.time() + 300
        while not (all(owned(x) > 0 for x in logs) and sum(owned(x) for x in logs) == a.partitions):
            for p in procs:
                if p.poll() is not None:
                    raise SystemExit(f"an instance exited early (rc {p.returncode}), see {work}/i*.log")
            if time.time() > deadline:
                raise SystemExit(f"{n} instances: the group did not settle in 5 min, see {work}/i*.log")
            time.sleep(0.5)
        time.sleep(2)  # the first (empty) poll after assignment: not synchronisation of results
        for p in procs:
            p.send_signal(signal.SIGSTOP)
        sh(gen_cmd(a, topic, "-part", "changes", "-offsets", offs_file))
        want = ends(read_offsets(offs_file))
        n_changes = sum(want.values()) - snap_n
        t_go = time.time()
        samples = [(t_go,) + usage([q for p in procs for q in tree(p.pid)])]
        for p in procs:
            p.send_signal(signal.SIGCONT)
        deadline = time.time() + a.timeout
        while True:
            samples.append((time.time(),) + usage([q for p in procs for q in tree(p.pid)]))
            pr = cdc_progress(table, sink, topic)
            if pr and covered(pr[-1]["offsets"], want):
                break
            for p in procs:
                if p.poll() is not None:
                    raise SystemExit(f"an instance exited early (rc {p.returncode}), see {work}/i*.log")
            if time.time() > deadline:
                raise SystemExit(f"{n} instances: timeout")
            time.sleep(0.5)
        t_done = time.time()
        ms = [metrics_of(x) for x in addrs]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=120)
        commits = [r for r in pr if r["t_end"] >= t_go]
        cpu_total = samples[-1][1] - samples[0][1]
        # steady window: from the first commit after every instance has committed once
        first = {}
        for v, mt, acts, _ in delta_commits(table):
            for x in acts:
                ci = x.get("commitInfo")
                if ci and mt >= t_go:
                    first.setdefault((ci.get("operationParameters") or {}).get("instance"), mt)
        t1 = max(first.values()) if first else t_go
        win = [r for r in commits if r["t_end"] >= t1]
        def at(t):
            best = samples[0]
            for s_ in samples:
                if s_[0] <= t:
                    best = s_
            return best[1]
        res = {"instances": n, "table": table, "contender": f"cdc-sink x{n}", "wall_seconds": t_done - t_go,
               "bootstrap_seconds": boot_s, "change_records": n_changes,
               "cpu_s_total": cpu_total, "cpu_s_per_million": cpu_total / n_changes * 1e6,
               "commits": len(commits),
               "replans": sum(msum(m, "cdcsink_commit_conflicts_total") for m in ms),
               "rebases": sum(msum(m, "cdcsink_commit_rebases_total") for m in ms),
               "attempts": sum(msum(m, "cdcsink_commit_attempts_count") for m in ms),
               "keys_indexed": [msum(m, "cdcsink_index_keys", 'kind="indexed"') for m in ms],
               "keys_located": [msum(m, "cdcsink_index_keys", 'kind="located"') for m in ms],
               "commits_per_instance": {k: 0 for k in first},
               "peak_rss_mib_sum": max(s_[2] for s_ in samples) / 2**20, "load_avg_end": loadavg()}
        if len(win) >= 2:
            recs = sum(win[-1]["offsets"].get(p, 0) for p in want) - sum(win[0]["offsets"].get(p, 0) for p in want)
            if recs > 0:
                res["steady"] = {"records": recs, "seconds": win[-1]["t_end"] - win[0]["t_end"],
                                 "cpu_s_per_million": (at(win[-1]["t_end"]) - at(win[0]["t_end"])) / recs * 1e6}
        for v, mt, acts, _ in delta_commits(table):
            for x in acts:
                ci = x.get("commitInfo")
                if ci and mt >= t_go:
                    k = (ci.get("operationParameters") or {}).get("instance")
                    res["commits_per_instance"][k] = res["commits_per_instance"].get(k, 0) + 1
        res["replans_per_commit"] = res["replans"] / max(1, res["attempts"])
        res["rebases_per_commit"] = res["rebases"] / max(1, res["attempts"])
        say(f"{n} instance(s): {json.dumps({k: v for k, v in res.items() if k != 'table'})}")
        out["results"].append(res)
        with open(raw, "w") as f:
            json.dump(out, f, indent=2)
    if a.no_gate:  # a re-measurement of figures: say so in the results
        out["gate"] = {"skipped": True, "pass": None}
    else:
        out["gate"] = gate(a, out["results"], runid)
        say("gate:", {k: (v["equal_to_expected"], v["diff_keys"]) for k, v in out["gate"]["tables"].items()})
    out["finished"] = dt.datetime.now(dt.timezone.utc).isoformat()
    with open(raw, "w") as f:
        json.dump(out, f, indent=2)
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    if out["gate"]["pass"] is False:
        raise SystemExit("correctness gate FAILED")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--size", type=int, default=5000, help="table size: snapshot rows")
    r.add_argument("--backlog", type=int, default=16000, help="change events drained as a backlog (throughput)")
    r.add_argument("--live", type=int, default=4000, help="change events produced live at --rate (latency)")
    r.add_argument("--rate", type=float, default=500)
    r.add_argument("--batch", type=int, default=4000, help="records per batch (all contenders)")
    r.add_argument("--max-interval", type=float, default=0.25, help="cdc-sink / delta-rs batch interval (s)")
    r.add_argument("--format", default="json-schema", choices=["json-schema", "json-plain", "avro"],
                   help="stream: JsonConverter with/without schemas, or AvroConverter (Confluent framing, --registry)")
    r.add_argument("--registry", default=os.environ.get("BENCH_REGISTRY", "http://127.0.0.1:8080/apis/ccompat/v7"),
                   help="Confluent-compatible schema registry for --format avro")
    r.add_argument("--partitions", type=int, default=2)
    r.add_argument("--row-width", type=int, default=200)
    r.add_argument("--duplicates", type=float, default=0.02)
    r.add_argument("--late", type=float, default=0.01)
    r.add_argument("--late-distance", type=int, default=6000)
    r.add_argument("--seed", type=int, default=7)
    r.add_argument("--contenders", default="cdc-sink,spark,delta-rs")
    r.add_argument("--consistency", default="eventual", choices=["eventual", "transaction"],
                   help="cdc-sink's consistency (transaction: the generator also writes END records on <topic>.transaction)")
    r.add_argument("--timeout", type=float, default=3600)
    r.add_argument("--runid", default="")
    r.add_argument("--keep", action="store_true")
    r.add_argument("--no-build", action="store_true")
    so = sub.add_parser("scaleout")
    so.add_argument("--size", type=int, default=100000, help="table size: snapshot rows")
    so.add_argument("--backlog", type=int, default=100000, help="change events drained by 1, 2, … instances")
    so.add_argument("--instances", default="1,2,3")
    so.add_argument("--pprof", action="store_true", help="serve /debug/pprof/ on each instance's listener (profiles)")
    so.add_argument("--no-gate", action="store_true", help="skip the correctness gate (recorded as skipped in the results)")
    so.add_argument("--layout", default="partition", choices=["partition", "batch"],
                    help="tables.layout of the bootstrap and the instances (batch: the one-file-per-batch baseline)")
    so.add_argument("--batch", type=int, default=10000)
    so.add_argument("--max-interval", type=float, default=0.25)
    so.add_argument("--partitions", type=int, default=6)
    so.add_argument("--row-width", type=int, default=200)
    so.add_argument("--duplicates", type=float, default=0.02)
    so.add_argument("--late", type=float, default=0.01)
    so.add_argument("--late-distance", type=int, default=6000)
    so.add_argument("--seed", type=int, default=7)
    so.add_argument("--timeout", type=float, default=3600)
    so.add_argument("--runid", default="")
    so.add_argument("--keep", action="store_true")
    so.add_argument("--no-build", action="store_true")
    so.set_defaults(format="json-plain", registry="")
    m = sub.add_parser("mergebench")
    m.add_argument("--sizes", default="100000,1000000")
    m.add_argument("--batch", type=int, default=10000)
    m.add_argument("--batches", type=int, default=10)
    m.add_argument("--no-build", action="store_true")
    for p in (r, m, so):
        p.add_argument("--brokers", default=os.environ.get("BENCH_BROKERS", "127.0.0.1:9092"))
        p.add_argument("--work", default=os.environ.get("BENCH_WORK", "/tmp/cdcsink-bench"))
        p.add_argument("--bin", default=os.environ.get("BENCH_BIN", "/tmp/cdcsink-bench/bin"))
        p.add_argument("--out", default=os.path.join(HERE, "results", "raw"))
    g = sub.add_parser("regate")
    g.add_argument("run_file")
    g.add_argument("--seed", type=int, default=7)
    g.add_argument("--work", default=os.environ.get("BENCH_WORK", "/tmp/cdcsink-bench"))
    g.add_argument("--bin", default=os.environ.get("BENCH_BIN", "/tmp/cdcsink-bench/bin"))
    g.add_argument("--brokers", default="unused")
    rep = sub.add_parser("report")
    rep.add_argument("--out", default=os.path.join(HERE, "results", "raw"))
    rep.add_argument("--results", default=os.path.join(HERE, "results"))
    rep.add_argument("--runs", default="", help="comma-separated run files (default: all in --out)")
    a = ap.parse_args()
    if a.cmd in ("run", "regate", "scaleout"):
        # The correctness gate reads the tables with these; refuse now, not after
        # a run of many minutes (the project venv has them: scripts/venv.sh).
        missing = [m for m in ("duckdb", "deltalake", "pyarrow") if importlib.util.find_spec(m) is None]
        if missing:
            ap.error(f"{sys.executable} lacks {', '.join(missing)} for the correctness gate; "
                     "run with .venv/bin/python (scripts/venv.sh makes it)")
    if a.cmd == "run":
        cmd_run(a)
    elif a.cmd == "mergebench":
        cmd_mergebench(a)
    elif a.cmd == "scaleout":
        cmd_scaleout(a)
    elif a.cmd == "regate":
        cmd_regate(a)
    else:
        import report
        report.write(a)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
