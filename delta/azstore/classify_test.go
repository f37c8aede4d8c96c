package azstore

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cdcsink/cdc-sink/delta"
)

// scripted answers every request with one status and error code.
type scripted struct {
	status int
	code   string
	err    error // a transport failure instead of a response
	urlErr bool  // wrap err in a *url.Error naming the request URL, as net/http does
	calls  atomic.Int32
}

func (f *scripted) Do(req *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if f.err != nil {
		if f.urlErr {
			return nil, &url.Error{Op: req.Method, URL: req.URL.String(), Err: f.err}
		}
		return nil, f.err
	}
	h := http.Header{}
	if f.code != "" {
		h.Set("x-ms-error-code", f.code)
	}
	body := ""
	if req.Method != http.MethodHead && f.code != "" {
		body = `<?xml version="1.0" encoding="utf-8"?><Error><Code>` + f.code + `</Code><Message>scripted</Message></Error>`
		h.Set("Content-Type", "application/xml")
	}
	return &http.Response{StatusCode: f.status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func fakeStore(t *testing.T, f *scripted) *Store {
	t.Helper()
	oldT, oldR := transport, retryOptions
	transport = f
	retryOptions = policy.RetryOptions{MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}
	t.Cleanup(func() { transport, retryOptions = oldT, oldR })
	const secret = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", "acct")
	t.Setenv("AZURE_STORAGE_KEY", secret)
	l, err := delta.ParseLocation("az://cont/root")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), l, delta.AzureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestClassify(t *testing.T) {
	type want int
	const (
		transient want = iota
		notFound
		exists
		permanent
	)
	cases := []struct {
		name   string
		f      *scripted
		op     func(s *Store) error
		want   want
		msg    string
		maxTry int32 // how many requests at most (bounded retries)
	}{
		{"503 ServerBusy", &scripted{status: 503, code: "ServerBusy"}, get, transient, "busy", 3},
		{"500 InternalError", &scripted{status: 500, code: "InternalError"}, put, transient, "busy", 3},
		{"500 OperationTimedOut", &scripted{status: 500, code: "OperationTimedOut"}, stat, transient, "busy", 3},
		{"429", &scripted{status: 429, code: "TooManyRequests"}, list, transient, "busy", 3},
		{"connection reset", &scripted{err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, get, transient, "connection reset", 3},
		{"unexpected EOF", &scripted{err: io.ErrUnexpectedEOF}, stat, transient, "no complete answer", 3},
		{"timeout", &scripted{err: timeoutErr{}}, get, transient, "no complete answer", 3},
		// a commit is never retried by the SDK: one request, then transient
		{"timeout on commit", &scripted{err: timeoutErr{}}, putIfAbsent, transient, "no complete answer", 1},
		{"503 on commit", &scripted{status: 503, code: "ServerBusy"}, putIfAbsent, transient, "busy", 1},
		{"404 BlobNotFound", &scripted{status: 404, code: "BlobNotFound"}, get, notFound, "no such object", 1},
		{"404 HEAD", &scripted{status: 404}, stat, notFound, "no such object", 1},
		{"404 ContainerNotFound", &scripted{status: 404, code: "ContainerNotFound"}, get, permanent, `container "cont" does not exist`, 1},
		{"409 BlobAlreadyExists", &scripted{status: 409, code: "BlobAlreadyExists"}, putIfAbsent, exists, "already exists", 1},
		{"412 ConditionNotMet", &scripted{status: 412, code: "ConditionNotMet"}, putIfAbsent, exists, "already exists", 1},
		{"403 AuthorizationPermissionMismatch", &scripted{status: 403, code: "AuthorizationPermissionMismatch"}, put, permanent, "Storage Blob Data Contributor", 1},
		{"403 AuthenticationFailed", &scripted{status: 403, code: "AuthenticationFailed"}, get, permanent, "authentication failed", 1},
		{"401 expired token", &scripted{status: 401, code: "InvalidAuthenticationInfo"}, list, permanent, "expired", 1},
		{"400 other", &scripted{status: 400, code: "InvalidHeaderValue"}, put, permanent, "refused", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			s := fakeStore(t, f)
			err := c.op(s)
			if err == nil {
				t.Fatal("no error")
			}
			var got want = permanent
			switch {
			case delta.IsTransient(err):
				got = transient
			case delta.IsNotFound(err):
				got = notFound
			case delta.IsExists(err):
				got = exists
			}
			if got != c.want {
				t.Errorf("%v: class %d, want %d", err, got, c.want)
			}
			if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "cont/root/") {
				t.Errorf("message %q lacks %q or the blob", err, c.msg)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("message holds the key: %v", err)
			}
			if n := f.calls.Load(); n > c.maxTry || c.maxTry == 1 && n != 1 {
				t.Errorf("%d requests, want at most %d", n, c.maxTry)
			}
		})
	}
}

func get(s *Store) error {
	_, err := s.Get(context.Background(), "_delta_log/x.json")
	return err
}
func stat(s *Store) error {
	_, err := s.Stat(context.Background(), "_delta_log/x.json")
	return err
}
func list(s *Store) error {
	_, err := s.List(context.Background(), "_delta_log", "")
	return err
}
func put(s *Store) error { return s.Put(context.Background(), "part-0.parquet", []byte("x")) }
func putIfAbsent(s *Store) error {
	return s.PutIfAbsent(context.Background(), "_delta_log/00000000000000000001.json", []byte("{}"))
}

func TestDeleteMissingIsNil(t *testing.T) {
	s := fakeStore(t, &scripted{status: 404, code: "BlobNotFound"})
	if err := s.Delete(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	loc := func(s string) delta.Location {
		l, err := delta.ParseLocation(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cases := []struct {
		loc  string
		opts delta.AzureOptions
		env  func(string) string
		url  string // "" = want an error containing errMsg
		kind string // key, sas, identity
		msg  string
	}{
		{"abfss://c@acct.dfs.core.windows.net/t", delta.AzureOptions{}, env(), "https://acct.blob.core.windows.net", "identity", ""},
		{"abfss://c@acct.dfs.core.chinacloudapi.cn/t", delta.AzureOptions{}, env("AZURE_STORAGE_KEY", "k"), "https://acct.blob.core.chinacloudapi.cn", "key", ""},
		{"abfss://c@acct.example.com/t", delta.AzureOptions{}, env(), "", "", "want account.dfs.core.windows.net"},
		{"az://c/t", delta.AzureOptions{}, env(), "", "", "names no storage account"},
		{"az://c/t", delta.AzureOptions{Account: "a1"}, env("AZURE_STORAGE_ACCOUNT", "a2"), "https://a1.blob.core.windows.net", "identity", ""},
		{"az://c/t", delta.AzureOptions{}, env("AZURE_STORAGE_ACCOUNT", "a2", "AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x"), "https://a2.blob.core.windows.net", "sas", ""},
		{"az://c/t", delta.AzureOptions{Endpoint: "http://127.0.0.1:1/devstoreaccount1"}, env("AZURE_STORAGE_ACCOUNT", "devstoreaccount1", "AZURE_STORAGE_KEY", "k"), "http://127.0.0.1:1/devstoreaccount1", "key", ""},
		{"az://c/t", delta.AzureOptions{}, env("AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=https;AccountName=cs;AccountKey=a2V5==;EndpointSuffix=core.usgovcloudapi.net"), "https://cs.blob.core.usgovcloudapi.net", "key", ""},
		{"az://c/t", delta.AzureOptions{}, env("AZURE_STORAGE_CONNECTION_STRING", "AccountName=cs;AccountKey=a2V5==;BlobEndpoint=http://127.0.0.1:9/cs"), "http://127.0.0.1:9/cs", "key", ""},
		{"abfss://c@other.dfs.core.windows.net/t", delta.AzureOptions{}, env("AZURE_STORAGE_CONNECTION_STRING", "AccountName=cs;AccountKey=a2V5=="), "", "", `for account "cs"`},
		{"az://c/t", delta.AzureOptions{}, env("AZURE_STORAGE_CONNECTION_STRING", "AccountName=cs"), "", "", "neither AccountKey"},
		{"az://c/t", delta.AzureOptions{Endpoint: "ftp://x"}, env("AZURE_STORAGE_ACCOUNT", "a"), "", "", "want http(s)://"},
	}
	for _, c := range cases {
		cfg, err := resolve(loc(c.loc), c.opts, c.env)
		if c.url == "" {
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%s: %v, want an error with %q", c.loc, err, c.msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.loc, err)
			continue
		}
		kind := "identity"
		if cfg.accountKey != "" {
			kind = "key"
		} else if cfg.sas != "" {
			kind = "sas"
		}
		if cfg.serviceURL != c.url || kind != c.kind {
			t.Errorf("%s: %s %s, want %s %s", c.loc, cfg.serviceURL, kind, c.url, c.kind)
		}
	}
}

// Open sends nothing: a backend is called to validate locations.
func TestOpenSendsNothing(t *testing.T) {
	f := &scripted{status: 500}
	fakeStore(t, f)
	t.Setenv("AZURE_STORAGE_KEY", "")
	l, _ := delta.ParseLocation("abfss://c@acct.dfs.core.windows.net/t")
	if _, err := Open(context.Background(), l, delta.AzureOptions{}); err != nil { // default credential chain
		t.Fatal(err)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("Open sent %d requests", n)
	}
}

// A SAS token travels in the query; no error message may show it.
func TestSASNotInMessages(t *testing.T) {
	f := &scripted{err: timeoutErr{}, urlErr: true}
	fakeStore(t, f)
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "sv=2024-01-01&sp=racwdl&sig=U0VDUkVUU0lH")
	l, _ := delta.ParseLocation("az://cont/root")
	s, err := Open(context.Background(), l, delta.AzureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Put(context.Background(), "k", []byte("x"))
	if !delta.IsTransient(err) || strings.Contains(err.Error(), "U0VDUkVUU0lH") || strings.Contains(err.Error(), "sig=") {
		t.Fatalf("%v: want transient without the SAS", err)
	}
	if !strings.Contains(err.Error(), "acct.blob.core.windows.net/cont/root") {
		t.Errorf("%v: want the blob's URL path", err)
	}
	t.Log(err)
}
