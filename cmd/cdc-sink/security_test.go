package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

func TestCheckClientCert(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	cert := func(from, to time.Time) []byte {
		tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sink"}, NotBefore: from, NotAfter: to}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := cert(now.AddDate(0, -1, 0), now.AddDate(1, 0, 0))
	cases := []struct {
		name string
		path string // "" = no ssl.certificate.location
		want string // in the error; "" = accepted
	}{
		{"none", "", ""},
		{"valid", write("valid.pem", valid), ""},
		{"key first, then the certificate", write("both.pem", append(append([]byte{}, keyPEM...), valid...)), ""},
		{"expired", write("expired.pem", cert(now.AddDate(-2, 0, 0), now.AddDate(-1, 0, 0))), "expired at 2025-12-02T00:00:00Z (brokers b1:9095 would refuse it)"},
		{"not yet valid", write("future.pem", cert(now.AddDate(0, 1, 0), now.AddDate(1, 0, 0))), "is not valid before 2027-01-02"},
		{"no certificate", write("key.pem", keyPEM), "no PEM certificate"},
		{"missing file", filepath.Join(dir, "absent.pem"), "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			props := map[string]string{}
			if c.path != "" {
				props["ssl.certificate.location"] = c.path
			}
			err := checkClientCert(props, []string{"b1:9095"}, now)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ssl.certificate.location")):
				t.Fatalf("got %v, want an error naming ssl.certificate.location with %q", err, c.want)
			}
		})
	}
}

// registry.cert_file/key_file: an expired client certificate is refused when
// the registry client is made (naming the file and the registry), a valid
// one is loaded, and a certificate without its key is a configuration error.
func TestRegistryClientCert(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile := filepath.Join(dir, "client.key")
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})))
	cert := func(name string, from, to time.Time) string {
		tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sink"}, NotBefore: from, NotAfter: to}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		writeFile(t, p, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
		return p
	}
	now := time.Now()
	valid := cert("valid.pem", now.Add(-time.Hour), now.Add(time.Hour))
	expired := cert("expired.pem", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	const url = "https://registry.example:8444/apis/ccompat/v7"
	if _, err := openRegistry(RegConf{URL: url, CertFile: valid, KeyFile: keyFile}); err != nil {
		t.Errorf("valid client certificate: %v", err)
	}
	_, err = openRegistry(RegConf{URL: url, CertFile: expired, KeyFile: keyFile})
	if err == nil || !strings.Contains(err.Error(), "registry.cert_file "+expired) || !strings.Contains(err.Error(), "expired at") ||
		!strings.Contains(err.Error(), "registry "+url) {
		t.Errorf("expired client certificate: %v, want a refusal naming the file and the registry", err)
	}
	if _, err := openRegistry(RegConf{URL: url, CertFile: valid, KeyFile: expired}); err == nil || !strings.Contains(err.Error(), "registry.key_file") {
		t.Errorf("a certificate as the key: %v", err)
	}
	cfgFile := filepath.Join(dir, "c.yaml")
	writeFile(t, cfgFile, "sink: s\nkafka: {brokers: [b:9092], topics: [t]}\ntables:\n  path_template: /tmp/x/{table}\nregistry:\n  url: "+url+"\n  cert_file: "+valid+"\n")
	if _, err := loadConfig([]string{"--config", cfgFile}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "registry.cert_file") {
		t.Errorf("cert_file without key_file: %v, want a configuration error", err)
	}
}

// /readyz names the authentication or TLS failure that keeps the brokers down.
func TestReadyzKafkaAuthError(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		st     source.BrokerStatus
		code   int
		errMsg string // kafkaError; "" = absent
	}{
		{"up", source.BrokerStatus{Up: true, Since: now.Add(-time.Hour)}, 200, ""},
		{"down for another reason", source.BrokerStatus{Since: now.Add(-time.Minute)}, 503, ""},
		{"refused, long enough", source.BrokerStatus{Since: now.Add(-time.Minute), AuthErr: "kafka: broker refused … sasl_ssl://b:9094/bootstrap"}, 503, "sasl_ssl://b:9094/bootstrap"},
		{"refused, not yet unreachable_after", source.BrokerStatus{Since: now.Add(-time.Second), AuthErr: "x"}, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMetrics("s")
			m.now = func() time.Time { return now }
			m.setReady(true)
			m.setBrokers(func() source.BrokerStatus { return c.st }, 15*time.Second)
			rec := httptest.NewRecorder()
			m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			got, _ := body["kafkaError"].(string)
			if rec.Code != c.code || (c.errMsg == "") != (got == "") || !strings.Contains(got, c.errMsg) {
				t.Errorf("HTTP %d %v, want %d with kafkaError %q", rec.Code, body, c.code, c.errMsg)
			}
		})
	}
}
