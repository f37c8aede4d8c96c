package envelope

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

const keyAvsc = `{"type":"record","name":"Key","namespace":"dbz.public.orders","fields":[{"name":"id","type":"int"}],"connect.name":"dbz.public.orders.Key"}`

// fakeRegistry speaks the Confluent API under Apicurio's ccompat path.
func fakeRegistry(t *testing.T, tlsServer bool) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /apis/ccompat/v7/schemas/ids/{id}", func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "sink" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error_code":401,"message":"Unauthorized"}`))
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		switch r.PathValue("id") {
		case "1":
			json.NewEncoder(w).Encode(map[string]any{"schema": keyAvsc})
		case "2":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error_code":40403,"message":"No content with id: 2"}`))
		case "3":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error_code":50001,"message":"storage down"}`))
		case "4":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`not json`))
		case "5":
			json.NewEncoder(w).Encode(map[string]any{"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"})
		case "6":
			<-r.Context().Done() // answers only when the client gives up
		}
	})
	var srv *httptest.Server
	if tlsServer {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestSRClientRegistry(t *testing.T) {
	srv, hits := fakeRegistry(t, false)
	// a generous timeout for the answers (a loaded -race run must not turn
	// them into timeouts); a short one where the timeout is the point
	reg := NewSRClientRegistry(srv.URL+"/apis/ccompat/v7", WithBasicAuth("sink", "s3cret"), WithTimeout(30*time.Second))
	hasty := NewSRClientRegistry(srv.URL+"/apis/ccompat/v7", WithBasicAuth("sink", "s3cret"), WithTimeout(100*time.Millisecond))
	ctx := context.Background()

	s, err := reg.Schema(ctx, 1)
	if err != nil || s != keyAvsc {
		t.Fatalf("hit: %q %v", s, err)
	}
	if _, err := reg.Schema(ctx, 1); err != nil || hits.Load() != 1 {
		t.Errorf("second lookup: err %v, %d requests (want cached)", err, hits.Load())
	}
	if _, err := reg.Schema(ctx, 2); reason(err) != quarantine.UnknownSchemaID || quarantine.IsTransient(err) {
		t.Errorf("404: %v", err)
	}
	if _, err := reg.Schema(ctx, 4); reason(err) != quarantine.UnknownSchemaID {
		t.Errorf("404 without JSON body: %v", err)
	}
	if _, err := reg.Schema(ctx, 3); !quarantine.IsTransient(err) {
		t.Errorf("500: %v", err)
	}
	if _, err := reg.Schema(ctx, 5); reason(err) != quarantine.MalformedAvro {
		t.Errorf("protobuf: %v", err)
	}
	if _, err := hasty.Schema(ctx, 6); !quarantine.IsTransient(err) {
		t.Errorf("timeout: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := reg.Schema(cctx, 7); !quarantine.IsTransient(err) {
		t.Errorf("cancelled: %v", err)
	}
	// wrong credentials: not the record's fault → transient
	bad := NewSRClientRegistry(srv.URL+"/apis/ccompat/v7", WithBasicAuth("sink", "nope"))
	if _, err := bad.Schema(ctx, 1); !quarantine.IsTransient(err) {
		t.Errorf("401: %v", err)
	}
	// closed server → transient
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	if _, err := NewSRClientRegistry(url+"/apis/ccompat/v7").Schema(ctx, 1); !quarantine.IsTransient(err) {
		t.Errorf("closed: %v", err)
	}

	// through the Decoder
	d := NewDecoder(Options{Registry: reg, Flattened: FlattenAlways})
	ev, err := d.Decode(ctx, &source.Record{Key: frame(1, []byte{0x54}), Value: frame(1, []byte{0x02})})
	if err != nil || keyID(t, ev) != 42 || ev.After.Values[0] != int64(1) {
		t.Errorf("decode via registry: %+v %v", ev, err)
	}
	if _, err := d.Decode(ctx, &source.Record{Value: frame(2, []byte{0})}); reason(err) != quarantine.UnknownSchemaID ||
		!strings.HasPrefix(err.(*quarantine.Error).Msg, "value: ") {
		t.Errorf("decode unknown id: %v", err)
	}
	if _, err := d.Decode(ctx, &source.Record{Value: frame(3, []byte{0})}); !quarantine.IsTransient(err) {
		t.Errorf("decode 500: %v", err)
	}
}

func TestSRClientRegistryTLS(t *testing.T) {
	srv, _ := fakeRegistry(t, true)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	reg := NewSRClientRegistry(srv.URL+"/apis/ccompat/v7/", WithBasicAuth("sink", "s3cret"),
		WithTLSConfig(&tls.Config{RootCAs: pool}))
	if s, err := reg.Schema(context.Background(), 1); err != nil || s != keyAvsc {
		t.Fatalf("tls: %q %v", s, err)
	}
	// without the CA the handshake fails: transient (configuration, not the record)
	noCA := NewSRClientRegistry(srv.URL+"/apis/ccompat/v7", WithBasicAuth("sink", "s3cret"))
	if _, err := noCA.Schema(context.Background(), 1); !quarantine.IsTransient(err) {
		t.Errorf("no CA: %v", err)
	}
}

// TestSRClientRegistryAccessErrors: a registry refusing the client (credentials, certificate)
// is a *RegistryAccessError naming the URL, from Check at start and from Schema (still
// transient there: credentials may be rotating); the password never appears.
func TestSRClientRegistryAccessErrors(t *testing.T) {
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "sink" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error_code":401,"message":"Unauthorized"}`))
			return
		}
		if strings.HasSuffix(r.URL.Path, "/subjects") {
			w.Write([]byte(`[]`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"schema": keyAvsc})
	})
	srv := httptest.NewTLSServer(auth)
	t.Cleanup(srv.Close)
	bare401 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "401 Unauthorized", http.StatusUnauthorized) // a proxy's text answer
	}))
	t.Cleanup(bare401.Close)
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error_code":40301,"message":"forbidden"}`))
	}))
	t.Cleanup(forbidden.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	trusted := WithTLSConfig(&tls.Config{RootCAs: pool})
	// a registry that requires a client certificate (mutual TLS) signed by clientCA
	client, clientCA := selfSignedClient(t)
	mtls := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/subjects") {
			w.Write([]byte(`[]`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"schema": keyAvsc})
	}))
	mtls.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA}
	mtls.StartTLS()
	t.Cleanup(mtls.Close)
	mpool := x509.NewCertPool()
	mpool.AddCert(mtls.Certificate())
	cases := []struct {
		name, url string
		opts      []SROption
		want      string // in the access error; "" = no error at all
	}{
		{"good", srv.URL, []SROption{WithBasicAuth("sink", "s3cret"), trusted}, ""},
		{"wrong password", srv.URL, []SROption{WithBasicAuth("sink", "wrong-pw"), trusted}, "unauthorized (401"},
		{"untrusted certificate", srv.URL, []SROption{WithBasicAuth("sink", "s3cret")}, "TLS: server certificate not accepted"},
		{"401 without a JSON body", bare401.URL, []SROption{WithBasicAuth("sink", "s3cret")}, "unauthorized (401"},
		{"403", forbidden.URL, []SROption{WithBasicAuth("sink", "s3cret")}, "forbidden (403"},
		{"mTLS", mtls.URL, []SROption{WithTLSConfig(&tls.Config{RootCAs: mpool, Certificates: []tls.Certificate{client}})}, ""},
		{"mTLS without a client certificate", mtls.URL, []SROption{WithTLSConfig(&tls.Config{RootCAs: mpool})},
			"requires a client certificate it trusts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := c.url + "/apis/ccompat/v7"
			reg := NewSRClientRegistry(url, c.opts...)
			cerr := reg.(Checker).Check(context.Background())
			_, serr := reg.Schema(context.Background(), 1)
			if c.want == "" {
				if cerr != nil || serr != nil {
					t.Fatalf("Check: %v, Schema: %v", cerr, serr)
				}
				return
			}
			for _, e := range []error{cerr, serr} {
				var ae *RegistryAccessError
				if !errors.As(e, &ae) || !strings.Contains(e.Error(), c.want) || !strings.Contains(e.Error(), url) {
					t.Errorf("got %v, want a RegistryAccessError with %q naming %s", e, c.want, url)
				}
				if e != nil && (strings.Contains(e.Error(), "wrong-pw") || strings.Contains(e.Error(), "s3cret")) {
					t.Errorf("the error holds the password: %v", e)
				}
			}
			if !quarantine.IsTransient(serr) {
				t.Errorf("Schema: %v, want transient (the pipeline retries it within its budget)", serr)
			}
		})
	}
	// unreachable: an error, but not an access error (run only logs it)
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	var ae *RegistryAccessError
	if err := NewSRClientRegistry(url).(Checker).Check(context.Background()); err == nil || errors.As(err, &ae) {
		t.Errorf("unreachable: %v", err)
	}
}

// selfSignedClient makes a client certificate for mutual TLS and a pool
// trusting it.
func selfSignedClient(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cdc-sink test client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
