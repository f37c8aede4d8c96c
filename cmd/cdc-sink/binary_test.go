package main

// The real binary: `cdc-sink run --config F` as a subprocess against an
// in-test kfake cluster: /progress, /metrics, /healthz, /readyz, SIGTERM
// exit 0, SIGKILL mid-stream and restart.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kfake"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	runTestChild() // exits when this is a child process (fence_test.go)
	// Tests talk to loopback only: no cloud SDK may fall back to a metadata
	// server (AWS IMDS, GCE metadata) when a test leaves credentials unset.
	for k, v := range map[string]string{"AWS_EC2_METADATA_DISABLED": "true", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
		"AZURE_CLIENT_ID": "", "IDENTITY_ENDPOINT": "", "MSI_ENDPOINT": ""} {
		os.Setenv(k, v)
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// testBuildVersion is the main.Version sinkBinary links in.
const testBuildVersion = "v0.0.0-binarytest"

// sinkBinary builds ./cmd/cdc-sink once per test binary, as a release is
// built (-X main.Version).
func sinkBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "cdc-sink-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "cdc-sink")
		start := time.Now()
		out, err := exec.Command("go", "build", "-ldflags", "-X main.Version="+testBuildVersion, "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
		t.Logf("built %s in %v", binPath, time.Since(start).Round(time.Millisecond))
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// sinkProc is one `cdc-sink run` process.
type sinkProc struct {
	cmd    *exec.Cmd
	stderr *logSink
	exited chan struct{}
	state  *os.ProcessState
}

func startBinary(t *testing.T, name, bin, cfgFile string) *sinkProc {
	t.Helper()
	return startProc(t, name, exec.Command(bin, "run", "--config", cfgFile))
}

// startProc starts cmd with its output collected under name; it is killed
// at cleanup if still running.
func startProc(t *testing.T, name string, cmd *exec.Cmd) *sinkProc {
	t.Helper()
	p := &sinkProc{stderr: &logSink{tag: name}, exited: make(chan struct{}), cmd: cmd}
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
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
	return p
}

// signal sends sig and waits (bounded) for the process to exit.
func (p *sinkProc) signal(t *testing.T, sig os.Signal, within time.Duration) (*os.ProcessState, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.exited:
		return p.state, time.Since(start)
	case <-time.After(within):
		t.Fatalf("no exit within %v of %v\n%s", within, sig, p.stderr.String())
	}
	return nil, 0
}

func (p *sinkProc) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("cdc-sink exited early (%v):\n%s", p.state, p.stderr.String())
	default:
	}
}

func writeBinConfig(t *testing.T, brokers []string, lake, sink, listen string) string {
	t.Helper()
	return writeBinConfigSession(t, brokers, lake, sink, listen, 6000)
}

// writeBinConfigSession is writeBinConfig with session.timeout.ms = sessionMs.
func writeBinConfigSession(t *testing.T, brokers []string, lake, sink, listen string, sessionMs int) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "cdc-sink.yaml")
	writeFile(t, f, fmt.Sprintf(`sink: %s
kafka:
  brokers: [%s]
  topics: [%s]
  properties: {session.timeout.ms: "%d", heartbeat.interval.ms: "100"}
tables:
  path_template: %s/{schema}.{table}
quarantine:
  topic: %s.quarantine
batch: {max_records: 100, max_bytes: 16MiB, max_interval: 50ms}
http: {listen: "%s"}
log: {level: info, format: json}
merge: {shutdown_grace: 20s}
`, sink, brokers[0], testTopic, sessionMs, lake, sink, listen))
	return f
}

func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, b := httpGet(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return mfs
}

// metricSum sums a counter or gauge family over the series whose labels
// include match.
func metricSum(mfs map[string]*dto.MetricFamily, name string, match map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range match {
			if labels[k] != v {
				ok = false
			}
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum, true
}

func TestBinary(t *testing.T) {
	bin := sinkBinary(t)

	// A run to the end of the stream: /progress, /metrics, health, SIGTERM.
	t.Run("metrics and SIGTERM", func(t *testing.T) {
		s := testStream(77, 1200, 250, 3, 8)
		const sink = "bin-sink"
		_, brokers := newKfake(t, 3, sink+".quarantine")
		if err := newProducer(t, brokers).produce(s.Records); err != nil {
			t.Fatal(err)
		}
		lake := t.TempDir()
		dir := tableDir(lake)
		addr := freePort(t)
		p := startBinary(t, "bin", bin, writeBinConfig(t, brokers, lake, sink, addr))
		var prog progressJSON
		waitUntil(t, 90*time.Second, "/progress totals.records = produced", func() bool {
			p.alive(t)
			code, b := httpGetMaybe("http://" + addr + "/progress")
			if code != 200 {
				return false
			}
			prog = progressJSON{}
			return json.Unmarshal(b, &prog) == nil && prog.Totals["records"] == int64(len(s.Records))
		})
		mfs := scrapeMetrics(t, addr)
		want := map[string]float64{"cdcsink_records_in_total": float64(len(s.Records)),
			"cdcsink_quarantined_total": float64(len(s.Malformed()))}
		for name, w := range want {
			if got, ok := metricSum(mfs, name, nil); !ok || got != w {
				t.Errorf("%s = %v (present %v), want %v", name, got, ok, w)
			}
		}
		table := ""
		for name := range prog.Tables {
			table = name
		}
		for _, action := range []string{"inserted", "updated", "deleted"} {
			got, ok := metricSum(mfs, "cdcsink_rows_total", map[string]string{"action": action, "table": table})
			if !ok || int64(got) != prog.Totals[action] {
				t.Errorf("cdcsink_rows_total{action=%q} = %v, /progress totals.%s = %d", action, got, action, prog.Totals[action])
			}
		}
		if prog.Totals["inserted"] == 0 || prog.Totals["updated"] == 0 || prog.Totals["deleted"] == 0 {
			t.Errorf("a stream with inserts, updates and deletes: totals %v", prog.Totals)
		}
		if got, _ := metricSum(mfs, "cdcsink_quarantined_total", nil); int64(got) != prog.Totals["quarantined"] {
			t.Errorf("cdcsink_quarantined_total %v, /progress totals.quarantined %d", got, prog.Totals["quarantined"])
		}
		if got, _ := metricSum(mfs, "cdcsink_batches_total", nil); int64(got) != prog.Totals["batches"] {
			t.Errorf("cdcsink_batches_total %v, /progress totals.batches %d", got, prog.Totals["batches"])
		}
		ver, ok := metricSum(mfs, "cdcsink_table_version", map[string]string{"table": table})
		if disk := diskVersion(dir); !ok || int64(ver) != disk || prog.Tables[table].Version != disk {
			t.Errorf("cdcsink_table_version %v, /progress %d, on disk %d", ver, prog.Tables[table].Version, disk)
		}
		lag, ok := metricSum(mfs, "cdcsink_consumer_lag", nil)
		if !ok || lag != 0 {
			t.Logf("cdcsink_consumer_lag %v (present %v) after the last batch", lag, ok)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, b := httpGet(t, "http://"+addr+path); code != 200 {
				t.Errorf("%s: %d %s", path, code, b)
			}
		}
		st, took := p.signal(t, syscall.SIGTERM, 30*time.Second)
		if st.ExitCode() != 0 {
			t.Errorf("exit code %d after SIGTERM\n%s", st.ExitCode(), p.stderr.String())
		}
		t.Logf("SIGTERM → exit %d in %v", st.ExitCode(), took.Round(time.Millisecond))
		if p.stderr.count("cdc-sink stopped") != 1 {
			t.Errorf("no clean stop in the log")
		}
		checkTable(t, dir, sink, s)
	})

	// SIGKILL twice mid-stream while records are produced, restart each time.
	t.Run("SIGKILL and restart", func(t *testing.T) {
		s := testStream(88, 3000, 500, 3, 10)
		const sink = "bin-kill"
		// A killed member stays in the group until its session times out,
		// delaying the restart's join: 3 s instead of kfake's default 6 s minimum.
		_, brokers := newKfakeWith(t, []kfake.Opt{kfake.GroupMinSessionTimeout(time.Second)}, 3, sink+".quarantine")
		lake := t.TempDir()
		dir := tableDir(lake)
		addr := freePort(t)
		cfgFile := writeBinConfigSession(t, brokers, lake, sink, addr, 3000)
		produced := gatedProducer(t, brokers, dir, chunks(s.Records, 8))
		for i, step := range []int64{3, 4} {
			p := startBinary(t, fmt.Sprintf("run%d", i), bin, cfgFile)
			from := diskVersion(dir)
			waitUntil(t, 90*time.Second, fmt.Sprintf("%d new versions after %d", step, from), func() bool {
				p.alive(t)
				return diskVersion(dir) >= from+step
			})
			st, _ := p.signal(t, syscall.SIGKILL, 10*time.Second)
			if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("run %d: not killed by SIGKILL: %v", i, st)
			}
			offs, v := tableProgress(t, dir, sink)
			t.Logf("run %d: SIGKILL at version %d, offsets %v", i, v, offs)
		}
		p := startBinary(t, "final", bin, cfgFile)
		waitProduced(t, produced)
		end := endOffsets(s)
		waitUntil(t, 2*time.Minute, "the restart to reach the end offsets", func() bool {
			p.alive(t)
			return caughtUp(t, dir, sink, end)
		})
		if st, _ := p.signal(t, syscall.SIGTERM, 30*time.Second); st.ExitCode() != 0 {
			t.Errorf("exit code %d after SIGTERM\n%s", st.ExitCode(), p.stderr.String())
		}
		checkTable(t, dir, sink, s)
		checkQuarantineCoords(t, brokers, sink+".quarantine", s)
	})
}
