package envelope

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

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
	c *srclient.SchemaRegistryClient
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
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if cfg.tls != nil {
			tr.TLSClientConfig = cfg.tls
		}
		hc = &http.Client{Timeout: cfg.timeout, Transport: tr}
	}
	c := srclient.NewSchemaRegistryClient(strings.TrimRight(url, "/"), srclient.WithClient(hc))
	if cfg.user != "" || cfg.pass != "" {
		c.SetCredentials(cfg.user, cfg.pass)
	}
	c.CodecCreationEnabled(false)
	return &srRegistry{c: c}
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
		return "", quarantine.Transient(fmt.Errorf("schema registry: schema id %d: %w", id, ctx.Err()))
	case res = <-ch:
	}
	if res.err != nil {
		if isNotFound(res.err) {
			return "", quarantine.Wrap(quarantine.UnknownSchemaID, res.err, "schema id %d not found in registry", id)
		}
		return "", quarantine.Transient(fmt.Errorf("schema registry: schema id %d: %w", id, res.err))
	}
	if t := res.s.SchemaType(); t != nil && *t != "" && *t != srclient.Avro {
		return "", quarantine.Errorf(quarantine.MalformedAvro, "schema id %d is %s, not AVRO", id, *t)
	}
	return res.s.Schema(), nil
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
