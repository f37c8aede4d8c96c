package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
