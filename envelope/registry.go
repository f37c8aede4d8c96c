package envelope

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/internal/redact"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/riferrei/srclient"
)

// Registry resolves a Confluent schema id to the Avro schema JSON.
//
// Implementations report an unknown id as a permanent *quarantine.Error with
// reason unknown_schema_id and anything retryable (network, 5xx, timeout) as
// quarantine.Transient. Any other error is treated as transient.
type Registry interface {
	Schema(ctx context.Context, id int) (string, error)
}

// SROption configures NewSRClientRegistry.
type SROption func(*srConfig)

type srConfig struct {
	user, pass string
	tls        *tls.Config
	timeout    time.Duration
	client     *http.Client
}

// WithBasicAuth sets HTTP basic-auth credentials.
func WithBasicAuth(user, password string) SROption {
	return func(c *srConfig) { c.user, c.pass = user, password }
}

// WithTLSConfig sets the TLS configuration (CA pool, client certificate, …).
func WithTLSConfig(t *tls.Config) SROption { return func(c *srConfig) { c.tls = t } }

// WithTimeout bounds one registry request (default 10s).
func WithTimeout(d time.Duration) SROption { return func(c *srConfig) { c.timeout = d } }

// WithHTTPClient replaces the HTTP client (WithTLSConfig/WithTimeout are then ignored).
func WithHTTPClient(h *http.Client) SROption { return func(c *srConfig) { c.client = h } }

type srRegistry struct {
	c   *srclient.SchemaRegistryClient
	url string // for errors, credentials redacted
	// raw and tls: the URL and TLS settings of the probe in Check (nil tls:
	// a custom HTTP client, no probe)
	raw string
	tls *tls.Config
}

// NewSRClientRegistry returns a Registry backed by github.com/riferrei/srclient
// speaking the Confluent API (GET {url}/schemas/ids/{id}). For Apicurio use
// its compatibility endpoint, e.g. http://host:8080/apis/ccompat/v7.
// Schemas are cached by id (srclient's cache; unknown ids are not cached).
// 404 → unknown_schema_id; a non-Avro schema → malformed_avro; network
// errors, timeouts, 5xx and other statuses → quarantine.Transient.
// srclient takes no context: a cancelled ctx returns at once (transient)
// while the request itself is bounded by the timeout.
func NewSRClientRegistry(url string, opts ...SROption) Registry {
	cfg := srConfig{timeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	hc := cfg.client
	probe := (*tls.Config)(nil)
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		probe = &tls.Config{}
		if cfg.tls != nil {
			tr.TLSClientConfig = cfg.tls
			probe = cfg.tls
		}
		hc = &http.Client{Timeout: cfg.timeout, Transport: tr}
	}
	c := srclient.NewSchemaRegistryClient(strings.TrimRight(url, "/"), srclient.WithClient(hc))
	if cfg.user != "" || cfg.pass != "" {
		c.SetCredentials(cfg.user, cfg.pass)
	}
	c.CodecCreationEnabled(false)
	return &srRegistry{c: c, url: redact.String(strings.TrimRight(url, "/")), raw: url, tls: probe}
}

func (r *srRegistry) Schema(ctx context.Context, id int) (string, error) {
	type result struct {
		s   *srclient.Schema
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := r.c.GetSchema(id)
		ch <- result{s, err}
	}()
	var res result
	select {
	case <-ctx.Done():
		return "", quarantine.Transient(fmt.Errorf("schema registry %s: schema id %d: %w", r.url, id, ctx.Err()))
	case res = <-ch:
	}
	if res.err != nil {
		if isNotFound(res.err) {
			return "", quarantine.Wrap(quarantine.UnknownSchemaID, res.err, "schema id %d not found in registry %s", id, r.url)
		}
		if ae := r.accessError(res.err); ae != nil {
			// still retried (the pipeline's budget): credentials may be rotating
			return "", quarantine.Transient(fmt.Errorf("schema id %d: %w", id, ae))
		}
		return "", quarantine.Transient(fmt.Errorf("schema registry %s: schema id %d: %w", r.url, id, res.err))
	}
	if t := res.s.SchemaType(); t != nil && *t != "" && *t != srclient.Avro {
		return "", quarantine.Errorf(quarantine.MalformedAvro, "schema id %d is %s, not AVRO", id, *t)
	}
	return res.s.Schema(), nil
}

// RegistryAccessError is the registry refusing this client: a 401/403
// answer (wrong or missing username/password) or a TLS failure (a server
// certificate the configured CA does not trust, an expired one, a name
// mismatch). It names the registry URL, never the password.
type RegistryAccessError struct {
	URL    string
	Reason string // "unauthorized (401; ...)", "TLS: ..."
	Err    error
}

func (e *RegistryAccessError) Error() string {
	return fmt.Sprintf("schema registry %s refused access: %s: %v", e.URL, e.Reason, e.Err)
}

func (e *RegistryAccessError) Unwrap() error { return e.Err }

// accessError classifies err as a *RegistryAccessError, or returns nil.
func (r *srRegistry) accessError(err error) *RegistryAccessError {
	code := 0
	var se srclient.Error
	if errors.As(err, &se) {
		code = se.Code
		if code >= 1000 { // Confluent's error_code is status*100+n
			code /= 100
		}
	} else if strings.HasPrefix(err.Error(), "401 ") {
		code = http.StatusUnauthorized
	} else if strings.HasPrefix(err.Error(), "403 ") {
		code = http.StatusForbidden
	}
	switch code {
	case http.StatusUnauthorized:
		return &RegistryAccessError{URL: r.url, Reason: "unauthorized (401; check registry.username and registry.password)", Err: err}
	case http.StatusForbidden:
		return &RegistryAccessError{URL: r.url, Reason: "forbidden (403; the registry user may not read schemas)", Err: err}
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	var he x509.HostnameError
	var ra tls.AlertError
	switch {
	case errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &ci), errors.As(err, &he):
		return &RegistryAccessError{URL: r.url, Reason: "TLS: server certificate not accepted (check registry.ca_file)", Err: err}
	case errors.As(err, &ra):
		return &RegistryAccessError{URL: r.url, Reason: "TLS: the server refused the handshake", Err: err}
	}
	// an alert the registry sent (crypto/tls reports it as a "remote error")
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		msg := oe.Err.Error()
		if strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate") {
			return &RegistryAccessError{URL: r.url, Reason: "TLS: the registry requires a client certificate it trusts (check registry.cert_file and registry.key_file)", Err: err}
		}
		return &RegistryAccessError{URL: r.url, Reason: "TLS: the server refused the handshake", Err: err}
	}
	return nil
}

// Check asks the registry for its subject list once: a wrong password or an
// untrusted certificate is then reported at start (a *RegistryAccessError)
// rather than at the first Avro record. Other failures (unreachable) are
// returned as they are; callers may carry on, as records are retried.
func (r *srRegistry) Check(ctx context.Context) error {
	if err := r.probeTLS(ctx); err != nil {
		return err
	}
	ch := make(chan error, 1)
	go func() {
		_, err := r.c.GetSubjects()
		ch <- err
	}()
	select {
	case <-ctx.Done():
		return fmt.Errorf("schema registry %s: %w", r.url, ctx.Err())
	case err := <-ch:
		if err == nil {
			return nil
		}
		if ae := r.accessError(err); ae != nil {
			return ae
		}
		return fmt.Errorf("schema registry %s: %w", r.url, err)
	}
}

// probeWait is how long probeTLS waits for a server's verdict on the
// client's certificate after the handshake.
const probeWait = time.Second

// probeTLS opens one TLS connection to an https registry and waits briefly
// for the server's verdict on it. With TLS 1.3 a server that refuses the
// client certificate (mutual TLS) says so only after the handshake, in an
// alert; an HTTP request written meanwhile often meets a reset connection
// instead, which reads like an unreachable registry. The probe writes
// nothing, so it reads the alert. Only a *RegistryAccessError is returned;
// anything else (unreachable, behind an HTTP proxy) is left to the request.
func (r *srRegistry) probeTLS(ctx context.Context) error {
	if r.tls == nil || !strings.HasPrefix(r.raw, "https://") {
		return nil
	}
	u, err := neturl.Parse(r.raw)
	if err != nil {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil // the request goes through a proxy: no direct probe
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	cfg := r.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		if ae := r.accessError(err); ae != nil {
			return ae
		}
		return nil
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(probeWait))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		if ae := r.accessError(err); ae != nil {
			return ae
		}
	}
	return nil
}

// Checker is a Registry that can test its access up front (NewSRClientRegistry's).
type Checker interface {
	Check(ctx context.Context) error
}

func isNotFound(err error) bool {
	var se srclient.Error
	if errors.As(err, &se) {
		return se.Code == http.StatusNotFound || se.Code/100 == http.StatusNotFound
	}
	// srclient returns the bare HTTP status when the body is not a JSON error
	return strings.HasPrefix(err.Error(), "404 ")
}

// MemoryRegistry is an in-process Registry (tests, demos, replays with known
// schemas). The zero value is not usable; call NewMemoryRegistry.
type MemoryRegistry struct {
	mu   sync.RWMutex
	m    map[int]string
	next int
}

// NewMemoryRegistry returns an empty MemoryRegistry; ids start at 1.
func NewMemoryRegistry() *MemoryRegistry { return &MemoryRegistry{m: map[int]string{}, next: 1} }

// Register stores schema under a new id (or the id it already has) and returns it.
func (r *MemoryRegistry) Register(schema string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.m {
		if s == schema {
			return id
		}
	}
	id := r.next
	r.next++
	r.m[id] = schema
	return id
}

// Set stores schema under id.
func (r *MemoryRegistry) Set(id int, schema string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[id] = schema
	if id >= r.next {
		r.next = id + 1
	}
}

// Schema implements Registry.
func (r *MemoryRegistry) Schema(_ context.Context, id int) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.m[id]
	if !ok {
		return "", quarantine.Errorf(quarantine.UnknownSchemaID, "schema id %d not found in registry", id)
	}
	return s, nil
}
