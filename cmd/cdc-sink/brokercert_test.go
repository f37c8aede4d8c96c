package main

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
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/internal/tlstest"
	"github.com/cdcsink/cdc-sink/source"
)

// A start-time TLS refusal names what is wrong with the broker's
// certificate, which librdkafka's "certificate verify failed" does not.
func TestExplainBrokerCert(t *testing.T) {
	now := time.Now()
	newCA := func(cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, key
	}
	ca, caKey := newCA("test CA")
	other, otherKey := newCA("other CA")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})))
	// broker serves a certificate for ip, valid [from, to], signed by parent
	broker := func(ip string, from, to time.Time, parent *x509.Certificate, pkey *ecdsa.PrivateKey) string {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"}, NotBefore: from, NotAfter: to,
			IPAddresses: []net.IP{net.ParseIP(ip)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &key.PublicKey, pkey)
		if err != nil {
			t.Fatal(err)
		}
		return tlstest.Serve(t, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	}
	cases := []struct {
		name, addr, want string // want "": the error unchanged
	}{
		{"expired", broker("127.0.0.1", now.Add(-48*time.Hour), now.Add(-24*time.Hour), ca, caKey), "which expired at"},
		{"not yet valid", broker("127.0.0.1", now.Add(24*time.Hour), now.Add(48*time.Hour), ca, caKey), "which is not valid before"},
		{"another CA", broker("127.0.0.1", now.Add(-time.Hour), now.Add(time.Hour), other, otherKey), `issued by "CN=other CA", which ssl.ca.location ` + caFile + " does not trust"},
		{"another host", broker("10.1.2.3", now.Add(-time.Hour), now.Add(time.Hour), ca, caKey), "which is not valid for 127.0.0.1"},
		{"valid (the failure was elsewhere)", broker("127.0.0.1", now.Add(-time.Hour), now.Add(time.Hour), ca, caKey), ""},
	}
	props := map[string]string{"ssl.ca.location": caFile}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := &source.AuthError{Detail: "ssl://" + c.addr + "/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified"}
			out := explainBrokerCert(context.Background(), in, props, now)
			var ae *source.AuthError
			if !errors.As(out, &ae) {
				t.Fatalf("%v: the AuthError is lost", out)
			}
			switch {
			case c.want == "" && out.Error() != in.Error():
				t.Errorf("valid certificate: %v, want the error unchanged", out)
			case c.want != "" && (!strings.Contains(out.Error(), c.want) || !strings.Contains(out.Error(), "broker "+c.addr)):
				t.Errorf("got %v\nwant the broker %s and %q", out, c.addr, c.want)
			}
		})
	}
	// other failures are left alone
	sasl := &source.AuthError{Detail: "sasl_ssl://127.0.0.1:1/bootstrap: SASL authentication error"}
	if out := explainBrokerCert(context.Background(), sasl, props, now); out.Error() != sasl.Error() {
		t.Errorf("a SASL failure changed: %v", out)
	}
}
