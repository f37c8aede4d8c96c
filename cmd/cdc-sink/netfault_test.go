//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"
)

// Network faults between the sink and its broker, on the project's own test
// hosts: the sink runs in a network namespace joined to this one by a veth
// pair, and the broker listens on this side of it. Taking this side's end of
// the pair down is a silent partition for the sink (its packets go nowhere,
// connections time out, as when a switch or a security group drops
// traffic), while this side still reaches the broker to produce. Needs root
// and iproute2; `make unit` sets CDC_SINK_NETNS=1, which turns a missing
// capability into a failure instead of a skip.

const netnsEnv = "CDC_SINK_NETNS"

// testNet is a network namespace with veth links to the test's namespace.
type testNet struct {
	ns    string
	fd    int // the namespace, for dialling into it
	links int
}

// netLink is one veth pair: hostIP on this side, nsIP in the namespace.
type netLink struct {
	hostIf       string
	hostIP, nsIP string
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		if os.Getenv(netnsEnv) != "" {
			t.Fatalf("%s is set but network namespaces are not available here (root: %v, ip: %v)", netnsEnv, os.Geteuid() == 0, err)
		}
		t.Skipf("network namespaces need root and iproute2 (set %s=1 to require them)", netnsEnv)
	}
	n := &testNet{ns: fmt.Sprintf("cdcsink-%d", os.Getpid())}
	ipCmd(t, "netns", "add", n.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns).Run() })
	ipCmd(t, "netns", "exec", n.ns, "ip", "link", "set", "lo", "up")
	fd, err := unix.Open("/var/run/netns/"+n.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	n.fd = fd
	return n
}

// link adds a veth pair (a /30 of 10.213/16 chosen from the pid and the
// link's number, so concurrent test binaries do not collide).
func (n *testNet) link(t *testing.T) *netLink {
	t.Helper()
	pid, i := os.Getpid(), n.links
	n.links++
	block := (pid&15)*4 + i // four links per test binary at most
	l := &netLink{
		hostIf: fmt.Sprintf("cdh%d_%d", pid%1000000, i),
		hostIP: fmt.Sprintf("10.213.%d.%d", (pid>>4)&255, block*4+1),
		nsIP:   fmt.Sprintf("10.213.%d.%d", (pid>>4)&255, block*4+2),
	}
	peer := fmt.Sprintf("cdn%d_%d", pid%1000000, i)
	ipCmd(t, "link", "add", l.hostIf, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l.hostIf).Run() })
	ipCmd(t, "link", "set", peer, "netns", n.ns)
	ipCmd(t, "addr", "add", l.hostIP+"/30", "dev", l.hostIf)
	ipCmd(t, "link", "set", l.hostIf, "up")
	ipCmd(t, "netns", "exec", n.ns, "ip", "addr", "add", l.nsIP+"/30", "dev", peer)
	ipCmd(t, "netns", "exec", n.ns, "ip", "link", "set", peer, "up")
	return l
}

// partition cuts (true) or restores (false) the link.
func (l *netLink) partition(t *testing.T, cut bool) {
	t.Helper()
	state := "up"
	if cut {
		state = "down"
	}
	ipCmd(t, "link", "set", l.hostIf, state)
}

// dial opens a connection from inside the namespace: the socket is created
// on an OS thread switched into it (a thread that cannot switch back is
// dropped with its goroutine).
func (n *testNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// get fetches url from inside the namespace.
func (n *testNet) get(url string) (int, []byte, error) {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: n.dial, DisableKeepAlives: true}}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// startSink runs `cdc-sink run` (the test binary in child mode) inside the
// namespace, with env added to this process's environment.
func (n *testNet) startSink(t *testing.T, cfgFile string, env ...string) *sinkProc {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", n.ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+cfgFile), env...)
	return startProc(t, "netns-sink", cmd)
}

// nsSinkURL is where startSink's sink listens, inside the namespace.
const nsSinkURL = "http://127.0.0.1:8081"

// readyz is the sink's /readyz status and body (0 when unreachable).
func (n *testNet) readyz() (int, map[string]any) {
	code, b, err := n.get(nsSinkURL + "/readyz")
	if err != nil {
		return 0, nil
	}
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	return code, body
}

// metric is the sink's sample of an unlabelled metric ("" if absent).
func (n *testNet) metric(name string) string {
	_, b, err := n.get(nsSinkURL + "/metrics")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// netSinkConfig writes the run configuration of the namespaced sink.
func netSinkConfig(t *testing.T, sink, broker, pathTemplate, extraKafka, extra string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "cdc-sink.yaml")
	// socket.timeout.ms bounds how long librdkafka waits on a silent
	// connection before it calls the broker down (default 60 s).
	writeFile(t, f, fmt.Sprintf(`sink: %s
kafka:
  brokers: [%s]
  topics: [%s]
  properties: {session.timeout.ms: "6000", heartbeat.interval.ms: "100", socket.timeout.ms: "3000"}
%s
tables:
  path_template: %s
quarantine:
  topic: %s.quarantine
batch: {max_records: 100, max_bytes: 16MiB, max_interval: 50ms}
http: {listen: "127.0.0.1:8081"}
log: {level: info, format: json}
merge: {shutdown_grace: 20s}
%s`, sink, broker, testTopic, extraKafka, pathTemplate, sink, extra))
	return f
}

// netKfake starts a broker listening on host (this side of a link).
func netKfake(t *testing.T, host, sink string) []string {
	t.Helper()
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic), kfake.SeedTopics(1, sink+".quarantine"),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, host+":0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl.ListenAddrs()
}

// offsetsOf is the end offset per partition of recs.
func offsetsOf(recs []*source.Record) map[int32]int64 {
	end := map[int32]int64{}
	for _, r := range recs {
		end[r.Partition] = max(end[r.Partition], r.Offset+1)
	}
	return end
}

// TestBrokerPartition: a sink cut off from its broker for longer than
// kafka.unreachable_after turns /readyz to 503 (naming since when) and
// cdcsink_kafka_connected to 0, commits nothing meanwhile, quarantines
// nothing, and once the link is back reconnects by itself, turns ready and
// catches up: the table equals the source model (and delta-rs reads it).
func TestBrokerPartition(t *testing.T) {
	n := newTestNet(t)
	l := n.link(t)
	const sink = "netfault"
	brokers := netKfake(t, l.hostIP, sink)
	s := testStream(41, 1200, 200, 3, 0)
	half := len(s.Records) / 2
	prod := newProducer(t, brokers)
	if err := prod.produce(s.Records[:half]); err != nil {
		t.Fatal(err)
	}
	lake := t.TempDir()
	p := n.startSink(t, netSinkConfig(t, sink, brokers[0], lake+"/{schema}.{table}", "  unreachable_after: 1s", ""))
	dir := tableDir(lake)
	waitUntil(t, 90*time.Second, "the first half applied", func() bool { p.alive(t); return caughtUp(t, dir, sink, offsetsOf(s.Records[:half])) })
	waitUntil(t, 30*time.Second, "ready while connected", func() bool {
		code, _ := n.readyz()
		return code == 200 && n.metric("cdcsink_kafka_connected") == "1"
	})

	l.partition(t, true)
	if err := prod.produce(s.Records[half:]); err != nil { // this side still reaches the broker
		t.Fatal(err)
	}
	waitUntil(t, 90*time.Second, "/readyz 503 naming the broker outage", func() bool {
		p.alive(t)
		code, body := n.readyz()
		return code == 503 && body["kafkaUnreachableSince"] != nil
	})
	if v := n.metric("cdcsink_kafka_connected"); v != "0" {
		t.Errorf("cdcsink_kafka_connected during the partition: %q", v)
	}
	if caughtUp(t, dir, sink, endOffsets(s)) {
		t.Fatal("the second half landed through a cut link")
	}
	cutAt, _ := tableProgress(t, dir, sink)

	l.partition(t, false)
	waitUntil(t, 120*time.Second, "caught up after the partition", func() bool { p.alive(t); return caughtUp(t, dir, sink, endOffsets(s)) })
	waitUntil(t, 60*time.Second, "ready again", func() bool {
		code, _ := n.readyz()
		return code == 200 && n.metric("cdcsink_kafka_connected") == "1"
	})
	checkTable(t, dir, sink, s)
	if q := quarantined(t, brokers, sink+".quarantine"); len(q) != 0 {
		t.Errorf("%d records quarantined for a network fault", len(q))
	}
	if log := p.stderr.String(); strings.Contains(log, "panic") {
		t.Errorf("the sink panicked:\n%s", log)
	}
	t.Logf("table offsets when the partition was detected: %v; end: %v", cutAt, endOffsets(s))
}

// forward accepts on host:0 and relays each connection to target.
func forward(t *testing.T, host, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestObjectStorePartition: the table lives on s3:// (SeaweedFS) behind its
// own link. Cut at start, the sink retries reading its tables instead of
// exiting; cut while batches are being committed, the store goes silent.
// Requests time out (storage.s3.response_timeout) as transient errors, the
// pipeline retries the batch, /readyz turns 503 after three failures while
// the broker link stays up, nothing is quarantined, and after the heal the
// sink commits on: versions stay contiguous and the table equals the model.
func TestObjectStorePartition(t *testing.T) {
	n := newTestNet(t)
	kl, sl := n.link(t), n.link(t)
	const sink = "netfault-s3"
	srv := s3Env(t, "lake-netfault")
	checkS3.opts = delta.StorageOptions{S3: delta.S3Options{Endpoint: srv.Endpoint, PathStyle: true}}
	checkS3.rs = map[string]string{
		"AWS_ENDPOINT_URL": srv.Endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
	}
	saved := storageOpts
	storageOpts = checkS3.opts // logVersions
	t.Cleanup(func() { checkS3.opts, checkS3.rs, storageOpts = delta.StorageOptions{}, nil, saved })
	storeAddr := forward(t, sl.hostIP, strings.TrimPrefix(srv.Endpoint, "http://"))
	brokers := netKfake(t, kl.hostIP, sink)
	s := testStream(43, 1200, 200, 3, 0)
	half := len(s.Records) / 2
	prod := newProducer(t, brokers)
	if err := prod.produce(s.Records[:half]); err != nil {
		t.Fatal(err)
	}
	const lake = "s3://lake-netfault/cdc"
	// The sink starts while the store is cut: reading the tables of the
	// assigned partitions fails transiently; it retries (and says so on
	// /readyz) instead of exiting, and starts once the store is back.
	sl.partition(t, true)
	p := n.startSink(t, netSinkConfig(t, sink, brokers[0], lake+"/{schema}.{table}", "",
		"storage: {s3: {endpoint: \"http://"+storeAddr+"\", path_style: true, response_timeout: 2s}}\n"),
		"CDC_SINK_STORAGE_S3_ENDPOINT=http://"+storeAddr) // s3Env's variable would win over the file
	dir := lake + "/public.orders"
	waitUntil(t, 120*time.Second, "assignment retried while the store is cut", func() bool {
		p.alive(t)
		return p.stderr.count("reading the table of an assigned partition failed transiently, retrying") >= 1
	})
	sl.partition(t, false)
	waitUntil(t, 120*time.Second, "the first half applied", func() bool { p.alive(t); return caughtUp(t, dir, sink, offsetsOf(s.Records[:half])) })

	sl.partition(t, true)
	if err := prod.produce(s.Records[half:]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 180*time.Second, "/readyz 503 while the store is unreachable", func() bool {
		p.alive(t)
		code, body := n.readyz()
		return code == 503 && body["kafkaUnreachableSince"] == nil && body["lastError"] != nil
	})
	_, body := n.readyz()
	cutAt, _ := tableProgress(t, dir, sink)
	if caughtUp(t, dir, sink, endOffsets(s)) {
		t.Fatal("the second half landed through a cut link")
	}

	sl.partition(t, false)
	waitUntil(t, 240*time.Second, "caught up after the partition", func() bool { p.alive(t); return caughtUp(t, dir, sink, endOffsets(s)) })
	waitUntil(t, 60*time.Second, "ready again", func() bool { code, _ := n.readyz(); return code == 200 })
	checkTable(t, dir, sink, s)
	checkContiguous(t, "after the store partition", logVersions(t, dir))
	if q := quarantined(t, brokers, sink+".quarantine"); len(q) != 0 {
		t.Errorf("%d records quarantined for a network fault", len(q))
	}
	if log := p.stderr.String(); strings.Contains(log, "panic") {
		t.Errorf("the sink panicked:\n%s", log)
	}
	t.Logf("store partition: /readyz said %v; table offsets then %v; end %v", body, cutAt, endOffsets(s))
}

// lossy drops pct % of the packets crossing the link's host end, both ways,
// with nftables (Debian nftables; the kernel's nf_tables and numgen). The
// returned func reads how many packets were dropped.
func (l *netLink) lossy(t *testing.T, pct int) (dropped func() int64) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv(netnsEnv) != "" {
			t.Fatalf("%s is set but nft (Debian nftables) is missing: %v", netnsEnv, err)
		}
		t.Skipf("packet loss needs nft (Debian nftables): %v", err)
	}
	tbl := "cdcsink_" + l.hostIf
	nft := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nft", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	nft("add", "table", "inet", tbl)
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", tbl).Run() })
	rule := fmt.Sprintf("numgen random mod 100 < %d counter drop", pct)
	nft("add", "chain", "inet", tbl, "in", "{ type filter hook input priority 0; policy accept; }")
	nft("add", "chain", "inet", tbl, "out", "{ type filter hook output priority 0; policy accept; }")
	nft("add", "rule", "inet", tbl, "in", "iifname", l.hostIf, rule)
	nft("add", "rule", "inet", tbl, "out", "oifname", l.hostIf, rule)
	return func() int64 {
		var n int64
		for _, line := range strings.Split(nft("list", "table", "inet", tbl), "\n") {
			var p, b int64
			if i := strings.Index(line, "counter packets "); i >= 0 {
				if _, err := fmt.Sscanf(line[i:], "counter packets %d bytes %d", &p, &b); err == nil {
					n += p
				}
			}
		}
		return n
	}
}

// TestSlowAndLossyBroker: the broker answers every request late (each
// response held back 400 ms by the broker itself: a slow broker, or a
// long round trip), then, on top of that, the link drops 10 % of the
// packets both ways. Neither is an outage: the sink stays ready and
// connected, quarantines nothing, commits on, and ends equal to the model.
func TestSlowAndLossyBroker(t *testing.T) {
	n := newTestNet(t)
	l := n.link(t)
	const sink = "netfault-slow"
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic), kfake.SeedTopics(1, sink+".quarantine"),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, l.hostIP+":0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	brokers := cl.ListenAddrs()
	s := testStream(47, 1200, 200, 3, 0)
	half := len(s.Records) / 2
	prod := newProducer(t, brokers)
	if err := prod.produce(s.Records[:half]); err != nil {
		t.Fatal(err)
	}
	// From here on every request waits 400 ms before the broker handles it
	// (SleepControl yields, so the broker's other connections go on).
	const delay = 400 * time.Millisecond
	var delayed atomic.Int64
	cl.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		delayed.Add(1)
		cl.SleepControl(func() { time.Sleep(delay) })
		return nil, nil, false
	})
	lake := t.TempDir()
	// socket.timeout.ms 3 s (netSinkConfig) is well above the added delay:
	// slow, not gone.
	p := n.startSink(t, netSinkConfig(t, sink, brokers[0], lake+"/{schema}.{table}", "  unreachable_after: 2s", ""))
	dir := tableDir(lake)
	t0 := time.Now()
	waitUntil(t, 180*time.Second, "the first half applied through the slow broker", func() bool {
		p.alive(t)
		return caughtUp(t, dir, sink, offsetsOf(s.Records[:half]))
	})
	slow := time.Since(t0)
	notReady := func() string {
		code, body := n.readyz()
		if code != 200 || n.metric("cdcsink_kafka_connected") != "1" {
			return fmt.Sprintf("/readyz %d %v, cdcsink_kafka_connected %q", code, body, n.metric("cdcsink_kafka_connected"))
		}
		return ""
	}
	if s := notReady(); s != "" {
		t.Errorf("slow broker: %s", s)
	}

	dropped := l.lossy(t, 10)
	if err := prod.produce(s.Records[half:]); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	waitUntil(t, 300*time.Second, "caught up through the slow, lossy link", func() bool {
		p.alive(t)
		return caughtUp(t, dir, sink, endOffsets(s))
	})
	lossy := time.Since(t1)
	if s := notReady(); s != "" {
		t.Errorf("slow broker, lossy link: %s", s)
	}
	if dropped() == 0 || delayed.Load() == 0 {
		t.Fatalf("no fault happened: %d packets dropped, %d requests delayed", dropped(), delayed.Load())
	}
	checkTable(t, dir, sink, s)
	if q := quarantined(t, brokers, sink+".quarantine"); len(q) != 0 {
		t.Errorf("%d records quarantined for a network fault", len(q))
	}
	if log := p.stderr.String(); strings.Contains(log, "panic") {
		t.Errorf("the sink panicked:\n%s", log)
	}
	t.Logf("slow broker (%s per request, %d requests delayed): first %d records in %s; with 10%% loss (%d packets dropped): last %d in %s",
		delay, delayed.Load(), half, slow.Round(10*time.Millisecond), dropped(), len(s.Records)-half, lossy.Round(10*time.Millisecond))
}
