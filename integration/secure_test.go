//go:build e2e

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/internal/tlstest"
)

// secureStack is what scripts/stack/env.sh exports for the stack's TLS endpoints (tls.sh).
type secureStack struct {
	SASLBrokers, SSLBrokers, SASLUser, SASLPassword string
	RegistryURL, RegistryUser, RegistryPassword     string
	RegistryMTLSURL                                 string // the registry over mutual TLS
	Dir                                             string // CA, certificates, keys
}

func loadSecureStack(t *testing.T) secureStack {
	t.Helper()
	need := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			// not a skip: CI's stack always has the TLS endpoints (CDC_SINK_STACK_TLS defaults to 1)
			t.Fatalf("%s not set: the stack runs without its TLS endpoints (restart it with scripts/stack/down.sh; scripts/stack/up.sh, CDC_SINK_STACK_TLS=1), then eval \"$(scripts/stack/env.sh)\"", k)
		}
		return v
	}
	secret := func(k string) string {
		b, err := os.ReadFile(need(k))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	return secureStack{
		SASLBrokers: need("CDC_SINK_KAFKA_SASL_BROKERS"), SSLBrokers: need("CDC_SINK_KAFKA_SSL_BROKERS"),
		SASLUser: need("CDC_SINK_KAFKA_SASL_USER"), SASLPassword: secret("CDC_SINK_KAFKA_SASL_PASSWORD_FILE"),
		RegistryURL: need("CDC_SINK_REGISTRY_TLS_URL"), RegistryUser: need("CDC_SINK_REGISTRY_TLS_USER"),
		RegistryPassword: secret("CDC_SINK_REGISTRY_TLS_PASSWORD_FILE"), Dir: need("CDC_SINK_TLS_DIR"),
		RegistryMTLSURL: need("CDC_SINK_REGISTRY_MTLS_URL"),
	}
}

func (s secureStack) file(name string) string { return filepath.Join(s.Dir, name) }

// secureConf is one sink's connection settings; the zero strings fall back to the good ones.
type secureConf struct {
	brokers    string
	props      map[string]string
	regURL     string
	regUser    string
	regPass    string
	regCA      string
	regCert    string // registry client certificate and key (mutual TLS)
	regKey     string
	quarantine string // quarantine topic ("" = none: a file)
}

func (s secureStack) sasl() map[string]string {
	return map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
		"sasl.username": s.SASLUser, "sasl.password": s.SASLPassword, "ssl.ca.location": s.file("ca.pem")}
}

func (s secureStack) mtls(cert string) map[string]string {
	return map[string]string{"security.protocol": "SSL", "ssl.ca.location": s.file("ca.pem"),
		"ssl.certificate.location": s.file(cert + ".pem"), "ssl.key.location": s.file(cert + ".key")}
}

// writeSecureConfig writes a run config for name reading topic into its own table.
func writeSecureConfig(t *testing.T, path, name, topic, table, listen string, c secureConf) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "sink: %s\nkafka:\n  brokers: [%s]\n  group: %s\n  topics: [%s]\n  unreachable_after: 2s\n  properties:\n", name, c.brokers, name, topic)
	for k, v := range c.props {
		fmt.Fprintf(&b, "    %s: %q\n", k, v)
	}
	fmt.Fprintf(&b, "tables:\n  map:\n    %s: %s\n", topic, table)
	fmt.Fprintf(&b, "registry:\n  url: %s\n  username: %s\n  password: %q\n  ca_file: %s\n", c.regURL, c.regUser, c.regPass, c.regCA)
	if c.regCert != "" {
		fmt.Fprintf(&b, "  cert_file: %s\n  key_file: %s\n", c.regCert, c.regKey)
	}
	if c.quarantine != "" {
		fmt.Fprintf(&b, "quarantine:\n  topic: %s\n", c.quarantine)
	} else {
		fmt.Fprintf(&b, "quarantine:\n  file: %s\n", filepath.Join(filepath.Dir(path), "quarantine.jsonl"))
	}
	fmt.Fprintf(&b, "batch:\n  max_records: 200\n  max_interval: 300ms\nhttp:\n  listen: %q\nlog:\n  level: debug\n  format: json\n", listen)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSecurePipes: one Avro pipe over SASL_SSL (SCRAM-SHA-512) with the registry over HTTPS and
// basic auth and the quarantine producer over SASL_SSL too (a poison record is quarantined), one
// pipe over mutual TLS to both the broker and the registry; wrong password, untrusted CA, a
// missing and an expired client certificate each stop the sink at start with an error naming the
// endpoint; and no output of the whole run holds a secret.
func TestSecurePipes(t *testing.T) {
	needStack(t)
	sec := loadSecureStack(t)
	pg := pgConn(t)
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	table := "sec_" + id
	source := "public." + table
	conn, slot, prefix := "sec-avro-"+id, "sec_avro_"+id, "sec_avro_"+id
	topic := prefix + ".public." + table
	qtopic := "sec-sink-" + id + ".quarantine"
	t.Cleanup(func() {
		deleteConnector(conn)
		c := pgConn(t)
		if err := dropSlot(c, slot); err != nil {
			t.Logf("cleanup: %v", err)
		}
		mustExec(t, c, "DROP PUBLICATION IF EXISTS "+slot)
		mustExec(t, c, "DROP TABLE IF EXISTS "+source)
		deleteTopics(topic, qtopic)
	})
	t0 := time.Now()
	mustExec(t, pg, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, name text NOT NULL, amount numeric(12,2))`, source))
	mustExec(t, pg, fmt.Sprintf(`INSERT INTO %s SELECT g, 'row ' || g, g * 1.25 FROM generate_series(1, 50) g`, source))
	mustExec(t, pg, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, slot, source))
	registerConnector(t, conn, connectorConfig("avro", table, slot, slot, prefix))
	waitFor(t, "the 50 snapshot records on "+topic, 3*time.Minute, func() bool { return highWater(topic) >= 50 },
		func() string { s, raw := connectorState(conn); return s + " " + raw })
	t.Logf("snapshot of %s on %s after %s", source, topic, time.Since(t0).Round(time.Millisecond))

	// A poison record (not Confluent-framed Avro), produced over SASL_SSL: quarantined.
	produceSASL(t, sec, topic, []byte(`{"id":999}`), []byte("not avro at all"))

	good := secureConf{brokers: sec.SASLBrokers, props: sec.sasl(), regURL: sec.RegistryURL,
		regUser: sec.RegistryUser, regPass: sec.RegistryPassword, regCA: sec.file("ca.pem")}
	var outputs []string // everything the run printed or served, scanned for secrets at the end

	// --- the SASL_SSL pipe, quarantine topic over SASL_SSL
	saslSink := newSink(t, "sec-sink-"+id, topic, "")
	saslListen := freeAddr(t)
	c := good
	c.quarantine = qtopic
	c.props = sec.sasl()
	c.props["debug"] = "security,broker,protocol" // librdkafka's own logs of the handshakes: scanned too
	writeSecureConfig(t, saslSink.ConfigPath, saslSink.Name, topic, saslSink.TableDir, saslListen, c)
	// --- the mTLS pipe (same topic, own group and table): client certificates for the broker
	// and the registry, no passwords
	mtlsSink := newSink(t, "sec-mtls-"+id, topic, "")
	c = good
	c.brokers, c.props = sec.SSLBrokers, sec.mtls("client")
	c.regURL, c.regUser, c.regPass = sec.RegistryMTLSURL, "", ""
	c.regCert, c.regKey = sec.file("client.pem"), sec.file("client.key")
	writeSecureConfig(t, mtlsSink.ConfigPath, mtlsSink.Name, topic, mtlsSink.TableDir, "", c)
	saslSink.Start(t)
	mtlsSink.Start(t)
	t.Cleanup(saslSink.Stop)
	t.Cleanup(mtlsSink.Stop)
	mustExec(t, pg, fmt.Sprintf(`UPDATE %s SET amount = amount + 1 WHERE id %% 5 = 0`, source))
	mustExec(t, pg, fmt.Sprintf(`DELETE FROM %s WHERE id = 7`, source))
	mustExec(t, pg, fmt.Sprintf(`INSERT INTO %s VALUES (51, 'late', 3.5)`, source))
	for _, s := range []*sinkProc{saslSink, mtlsSink} {
		var last string
		d := waitFor(t, s.Name+" table == "+source, 2*time.Minute, func() bool {
			if !s.Alive() {
				t.Fatalf("%s exited: %v\n%s", s.Name, s.exitErr, s.Tail(30))
			}
			out, code := verify(source, s.TableDir)
			last = out
			return code == 0
		}, func() string { return last + "\n" + s.Tail(30) })
		t.Logf("%s converged in %s", s.Name, d.Round(time.Millisecond))
		tb := deltacheck.ReadDeltaRS(t, s.TableDir, "NOT _cdc_deleted")
		if len(tb.Rows) != 50 { // 50 seeded, one deleted, one inserted
			t.Errorf("%s: delta-rs reads %d live rows, want 50", s.Name, len(tb.Rows))
		}
	}
	// the poison record went to the quarantine topic through the SASL_SSL producer
	waitFor(t, "the poison record on "+qtopic, time.Minute, func() bool { return highWater(qtopic) == 1 },
		func() string { return fmt.Sprintf("end offset %d\n%s", highWater(qtopic), saslSink.Tail(30)) })
	if b, _ := os.ReadFile(mtlsSink.QuarantinePath()); strings.Count(string(b), "\n") != 1 {
		t.Errorf("mTLS sink quarantine file: want the one poison record, got %q", b)
	}
	for _, path := range []string{"/progress", "/metrics", "/status.json", "/readyz", "/"} {
		body := httpGet(t, "http://"+saslListen+path)
		outputs = append(outputs, body)
	}
	// replay --topics over SASL_SSL with the run config's connection settings and registry
	replayDir := filepath.Join(filepath.Dir(saslSink.ConfigPath), "replayed")
	out, code := runClean(t, 2*time.Minute, "replay", "--config", saslSink.ConfigPath, "--topics", topic, "--table", replayDir,
		"--quarantine-file", filepath.Join(filepath.Dir(replayDir), "replay-quarantine.jsonl"), "--quiet")
	outputs = append(outputs, out)
	if code != 0 {
		t.Fatalf("replay over SASL_SSL: exit %d\n%s", code, tailLines(out, 20))
	}
	if vout, code := verify(source, replayDir); code != 0 {
		t.Errorf("replayed table != %s:\n%s", source, vout)
	}
	// the quarantine topic read back over SASL_SSL with the same config
	out, code = runClean(t, time.Minute, "quarantine", "list", "--config", saslSink.ConfigPath)
	outputs = append(outputs, out)
	if code != 0 || !strings.Contains(out, topic) || !strings.Contains(out, "malformed") {
		t.Errorf("quarantine list --config over SASL_SSL: exit %d, want the poison record of %s:\n%s", code, topic, tailLines(out, 20))
	}
	// A Go runtime crash dump (SIGQUIT: every goroutine's stack, as a panic prints it).
	_ = mtlsSink.cmd.Process.Signal(syscall.SIGQUIT)
	<-mtlsSink.exited
	saslSink.Stop()
	for _, s := range []*sinkProc{saslSink, mtlsSink} {
		b, _ := os.ReadFile(s.LogPath)
		outputs = append(outputs, string(b))
	}
	if !strings.Contains(outputs[len(outputs)-1], "goroutine ") {
		t.Errorf("SIGQUIT printed no goroutine dump:\n%s", mtlsSink.Tail(10))
	}

	// --- refused at start, each with an error naming the endpoint
	expiredBroker := expiredTLSServer(t, sec)
	bad := []struct {
		name  string
		edit  func(*secureConf)
		wants []string
	}{
		{"kafka wrong password", func(c *secureConf) { c.props = sec.sasl(); c.props["sasl.password"] = "wrong-" + id },
			[]string{"sasl_ssl://" + sec.SASLBrokers, "SASL authentication error", "invalid credentials"}},
		{"kafka untrusted CA", func(c *secureConf) { c.props = sec.sasl(); c.props["ssl.ca.location"] = sec.file("other-ca.pem") },
			[]string{"sasl_ssl://" + sec.SASLBrokers, "certificate verify failed"}},
		{"kafka expired client certificate", func(c *secureConf) { c.brokers, c.props = sec.SSLBrokers, sec.mtls("expired") },
			[]string{sec.file("expired.pem"), "expired"}},
		// what the broker answers an absent (or expired, unknown) client certificate with
		{"kafka no client certificate", func(c *secureConf) {
			c.brokers, c.props = sec.SSLBrokers, sec.mtls("client")
			delete(c.props, "ssl.certificate.location")
			delete(c.props, "ssl.key.location")
		}, []string{"ssl://" + sec.SSLBrokers, "SSL alert"}},
		// a TLS endpoint presenting an expired certificate of the stack's CA stands for a broker
		// (the handshake fails before any Kafka request): librdkafka only says "certificate
		// verify failed … check ssl.ca.location"; the sink adds what is wrong
		{"kafka expired broker certificate", func(c *secureConf) { c.brokers, c.props = expiredBroker, sec.sasl() },
			[]string{"sasl_ssl://" + expiredBroker, "certificate verify failed", "broker " + expiredBroker + " presents certificate", "which expired at"}},
		{"registry wrong password", func(c *secureConf) { c.regPass = "wrong-" + id },
			[]string{sec.RegistryURL, "401"}},
		{"registry untrusted CA", func(c *secureConf) { c.regCA = sec.file("other-ca.pem") },
			[]string{sec.RegistryURL, "certificate"}},
		{"registry mTLS without a client certificate", func(c *secureConf) { c.regURL, c.regUser, c.regPass = sec.RegistryMTLSURL, "", "" },
			[]string{sec.RegistryMTLSURL, "requires a client certificate"}},
		{"registry mTLS expired client certificate", func(c *secureConf) {
			c.regURL, c.regUser, c.regPass = sec.RegistryMTLSURL, "", ""
			c.regCert, c.regKey = sec.file("expired.pem"), sec.file("expired.key")
		}, []string{sec.file("expired.pem"), "expired", "registry " + sec.RegistryMTLSURL}},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			dir := filepath.Join(suiteDir, fmt.Sprintf("sec-bad-%d-%s", i, id))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "sink.yaml")
			writeSecureConfig(t, cfg, fmt.Sprintf("sec-bad-%d-%s", i, id), topic, filepath.Join(dir, "table"), "", c)
			t1 := time.Now()
			out, code := runClean(t, 90*time.Second, "run", "--config", cfg)
			outputs = append(outputs, out)
			if code == 0 {
				t.Fatalf("run exited 0; want a refusal:\n%s", tailLines(out, 20))
			}
			last := lastLine(out)
			for _, w := range tc.wants {
				if !strings.Contains(last, w) {
					t.Errorf("the error does not say %q:\n%s", w, last)
				}
			}
			t.Logf("refused after %s (exit %d): %s", time.Since(t1).Round(time.Millisecond), code, last)
		})
	}

	// --- no secret anywhere
	key, err := os.ReadFile(sec.file("client.key"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"SCRAM password": sec.SASLPassword, "registry password": sec.RegistryPassword,
		"private key header": "PRIVATE KEY-----"}
	for _, l := range strings.Split(string(key), "\n") {
		if len(l) >= 32 && !strings.HasPrefix(l, "-----") {
			secrets["client private key PEM"] = l
		}
	}
	// the scan can fail: the SASL sink's config file holds both passwords
	cfgText, _ := os.ReadFile(saslSink.ConfigPath)
	for _, s := range []string{sec.SASLPassword, sec.RegistryPassword} {
		if !strings.Contains(string(cfgText), s) {
			t.Fatalf("control: %s does not hold a password the scan looks for", saslSink.ConfigPath)
		}
	}
	for name, s := range secrets {
		for i, out := range outputs {
			if strings.Contains(out, s) {
				t.Errorf("output %d holds the %s:\n%s", i, name, clip(out, 2000))
			}
		}
	}
	t.Logf("scanned %d outputs (%d bytes) for %d secrets in %s total", len(outputs), totalLen(outputs), len(secrets), time.Since(t0).Round(time.Millisecond))
}

func totalLen(ss []string) (n int) {
	for _, s := range ss {
		n += len(s)
	}
	return n
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := httpc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// runClean runs the cdc-sink CLI until it exits, without the CDC_SINK_* variables env.sh
// exported (they would override the config file's keys); still running after timeout fails the
// test (a refused connection must stop run).
func runClean(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CDC_SINK_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s still running after %s:\n%s", args[0], timeout, tailLines(string(out), 20))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee != nil {
		return string(out), ee.ExitCode()
	}
	return string(out), 0
}

// produceSASL writes one record over the SASL_SSL listener.
func produceSASL(t *testing.T, sec secureStack, topic string, key, value []byte) {
	t.Helper()
	cm := kafka.ConfigMap{"bootstrap.servers": sec.SASLBrokers, "log_level": 3}
	for k, v := range sec.sasl() {
		cm[k] = v
	}
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dr := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key: key, Value: value}, dr); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-dr:
		if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatalf("produce over SASL_SSL: %v", m.TopicPartition.Error)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("produce over SASL_SSL: no delivery report in 30s")
	}
}

// expiredTLSServer serves TLS on 127.0.0.1 with a certificate of the stack's CA that expired
// yesterday, and returns its address.
func expiredTLSServer(t *testing.T, sec secureStack) string {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(sec.file(name))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM block", name)
		}
		return blk.Bytes
	}
	ca, err := x509.ParseCertificate(read("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(read("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tlstest.Serve(t, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
}
