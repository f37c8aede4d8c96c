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
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
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

// testNet is a network namespace with a veth link to the test's namespace.
type testNet struct {
	ns           string
	hostIf       string
	hostIP, nsIP string
	fd           int // the namespace, for dialling into it
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
	pid := os.Getpid()
	n := &testNet{
		ns:     fmt.Sprintf("cdcsink-%d", pid),
		hostIf: fmt.Sprintf("cdh%d", pid%10000000),
		hostIP: fmt.Sprintf("10.213.%d.%d", (pid>>6)&255, (pid&63)*4+1),
		nsIP:   fmt.Sprintf("10.213.%d.%d", (pid>>6)&255, (pid&63)*4+2),
	}
	peer := fmt.Sprintf("cdn%d", pid%10000000)
	ipCmd(t, "netns", "add", n.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns).Run() })
	ipCmd(t, "link", "add", n.hostIf, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", n.hostIf).Run() })
	ipCmd(t, "link", "set", peer, "netns", n.ns)
	ipCmd(t, "addr", "add", n.hostIP+"/30", "dev", n.hostIf)
	ipCmd(t, "link", "set", n.hostIf, "up")
	ipCmd(t, "netns", "exec", n.ns, "ip", "addr", "add", n.nsIP+"/30", "dev", peer)
	ipCmd(t, "netns", "exec", n.ns, "ip", "link", "set", peer, "up")
	ipCmd(t, "netns", "exec", n.ns, "ip", "link", "set", "lo", "up")
	fd, err := unix.Open("/var/run/netns/"+n.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	n.fd = fd
	return n
}

// partition cuts (true) or restores (false) the link.
func (n *testNet) partition(t *testing.T, cut bool) {
	t.Helper()
	state := "up"
	if cut {
		state = "down"
	}
	ipCmd(t, "link", "set", n.hostIf, state)
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

// TestBrokerPartition: a sink cut off from its broker for longer than
// kafka.unreachable_after turns /readyz to 503 (naming since when) and
// cdcsink_kafka_connected to 0, commits nothing meanwhile, quarantines
// nothing, and once the link is back reconnects by itself, turns ready and
// catches up: the table equals the source model (and delta-rs reads it).
func TestBrokerPartition(t *testing.T) {
	n := newTestNet(t)
	const sink = "netfault"
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic), kfake.SeedTopics(1, sink+".quarantine"),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, n.hostIP+":0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	brokers := cl.ListenAddrs()
	s := testStream(41, 1200, 200, 3, 0)
	half := len(s.Records) / 2
	prod := newProducer(t, brokers)
	if err := prod.produce(s.Records[:half]); err != nil {
		t.Fatal(err)
	}
	firstEnd := map[int32]int64{}
	for _, r := range s.Records[:half] {
		firstEnd[r.Partition] = max(firstEnd[r.Partition], r.Offset+1)
	}

	lake := t.TempDir()
	cfgFile := filepath.Join(t.TempDir(), "cdc-sink.yaml")
	// socket.timeout.ms bounds how long librdkafka waits on a silent
	// connection before it calls the broker down (default 60 s).
	writeFile(t, cfgFile, fmt.Sprintf(`sink: %s
kafka:
  brokers: [%s]
  topics: [%s]
  properties: {session.timeout.ms: "6000", heartbeat.interval.ms: "100", socket.timeout.ms: "3000"}
  unreachable_after: 1s
tables:
  path_template: %s/{schema}.{table}
quarantine:
  topic: %s.quarantine
batch: {max_records: 100, max_bytes: 16MiB, max_interval: 50ms}
http: {listen: "127.0.0.1:8081"}
log: {level: info, format: json}
merge: {shutdown_grace: 20s}
`, sink, brokers[0], testTopic, lake, sink))
	p := &sinkProc{stderr: &logSink{tag: "netns-sink"}, exited: make(chan struct{})}
	p.cmd = exec.Command("ip", "netns", "exec", n.ns, os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), childEnv+"="+cfgFile)
	p.cmd.Stderr, p.cmd.Stdout = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	const base = "http://127.0.0.1:8081"
	readyz := func() (int, map[string]any) {
		code, b, err := n.get(base + "/readyz")
		if err != nil {
			return 0, nil
		}
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		return code, body
	}
	connected := func() string {
		_, b, err := n.get(base + "/metrics")
		if err != nil {
			return ""
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "cdcsink_kafka_connected "); ok {
				return v
			}
		}
		return ""
	}
	dir := tableDir(lake)
	waitUntil(t, 90*time.Second, "the first half applied", func() bool { p.alive(t); return caughtUp(t, dir, sink, firstEnd) })
	waitUntil(t, 30*time.Second, "ready while connected", func() bool { code, _ := readyz(); return code == 200 && connected() == "1" })

	n.partition(t, true)
	if err := prod.produce(s.Records[half:]); err != nil { // this side still reaches the broker
		t.Fatal(err)
	}
	waitUntil(t, 90*time.Second, "/readyz 503 naming the broker outage", func() bool {
		p.alive(t)
		code, body := readyz()
		return code == 503 && body["kafkaUnreachableSince"] != nil
	})
	if v := connected(); v != "0" {
		t.Errorf("cdcsink_kafka_connected during the partition: %q", v)
	}
	if caughtUp(t, dir, sink, endOffsets(s)) {
		t.Fatal("the second half landed through a cut link")
	}
	cutAt, _ := tableProgress(t, dir, sink)

	n.partition(t, false)
	waitUntil(t, 120*time.Second, "caught up after the partition", func() bool { p.alive(t); return caughtUp(t, dir, sink, endOffsets(s)) })
	waitUntil(t, 60*time.Second, "ready again", func() bool { code, _ := readyz(); return code == 200 && connected() == "1" })
	checkTable(t, dir, sink, s)
	if q := quarantined(t, brokers, sink+".quarantine"); len(q) != 0 {
		t.Errorf("%d records quarantined for a network fault", len(q))
	}
	log := p.stderr.String()
	if strings.Contains(log, "panic") {
		t.Errorf("the sink panicked:\n%s", log)
	}
	t.Logf("table offsets when the partition was detected: %v; end: %v", cutAt, endOffsets(s))
}
