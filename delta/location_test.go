// Tests of table location parsing.

package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseLocation(t *testing.T) {
	ok := []struct{ in, canon, scheme, bucket, path string }{
		{"lake/orders", "lake/orders", "", "", "lake/orders"},
		{"./lake//orders/", "lake/orders", "", "", "lake/orders"},
		{"/data/lake/a:b", "/data/lake/a:b", "", "", "/data/lake/a:b"},
		{"./a:b", "a:b", "", "", "a:b"},
		{"file:///data/lake/orders", "/data/lake/orders", "file", "", "/data/lake/orders"},
		{"file://localhost/data/x%20y", "/data/x y", "file", "", "/data/x y"},
		{"s3://lake/orders", "s3://lake/orders", "s3", "lake", "orders"},
		{"S3A://lake/db/orders/", "s3a://lake/db/orders", "s3a", "lake", "db/orders"},
		{"gs://bkt/t", "gs://bkt/t", "gs", "bkt", "t"},
		{"az://container/t", "az://container/t", "az", "container", "t"},
		{"abfss://c@acct.dfs.core.windows.net/t/x", "abfss://c@acct.dfs.core.windows.net/t/x", "abfss", "c", "t/x"},
	}
	for _, c := range ok {
		l, err := ParseLocation(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if l.String() != c.canon || l.Scheme != c.scheme || l.Bucket != c.bucket || l.Path != c.path {
			t.Errorf("%q = %+v (%s), want canon %q scheme %q bucket %q path %q", c.in, l, l, c.canon, c.scheme, c.bucket, c.path)
		}
		if l.IsLocal() != (c.scheme == "" || c.scheme == "file") {
			t.Errorf("%q: IsLocal = %v", c.in, l.IsLocal())
		}
	}
	bad := map[string]string{
		"":                                    "empty",
		"s3:/lake/orders":                     "malformed URL",
		"s3:lake":                             "malformed URL",
		"hdfs://nn/t":                         `unsupported scheme "hdfs"`,
		"foo://x":                             `unsupported scheme "foo"`,
		"a:b":                                 `unsupported scheme "a"`,
		"s3:///orders":                        "missing bucket",
		"gs://":                               "missing bucket",
		"abfss://acct.dfs.core.windows.net/t": "want abfss://container@",
		"file://otherhost/x":                  "only local files",
		"s3://key:secret@lake/x":              "credentials",
		"s3://lake/x?versionId=1":             "query",
	}
	for in, want := range bad {
		_, err := ParseLocation(in)
		var le *LocationError
		if !errors.As(err, &le) || !errors.Is(err, ErrInvalidLocation) || le.Location != in {
			t.Errorf("%q: err %v, want a *LocationError for it matching ErrInvalidLocation", in, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), in) {
			t.Errorf("%q: %q does not name the location and say %q", in, err, want)
		}
	}
}

func TestOpenStorage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	for _, loc := range []string{"s3://lake/orders", "s3a://lake/orders", "gs://b/t", "az://c/t", "abfss://c@a.dfs.core.windows.net/t"} {
		_, err := OpenStorage(ctx, loc, StorageOptions{})
		var le *LocationError
		if !errors.Is(err, ErrBackendNotBuilt) || !errors.As(err, &le) || le.Location != loc ||
			!strings.Contains(err.Error(), "not built in") || !strings.Contains(err.Error(), loc) {
			t.Errorf("%s: %v, want ErrBackendNotBuilt naming it", loc, err)
		}
	}
	if _, err := OpenStorage(ctx, "foo://x", StorageOptions{}); !errors.Is(err, ErrInvalidLocation) {
		t.Errorf("foo://x: %v", err)
	}
	st, err := OpenStorage(ctx, "file://"+filepath.Join(dir, "t1"), StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ls, ok := st.(*LocalStorage); !ok || ls.Root != filepath.Join(dir, "t1") {
		t.Fatalf("file URL storage %#v", st)
	}
	tb, err := OpenLocation(ctx, "rel/t2", StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ls := tb.Store().(*LocalStorage); ls.Root != filepath.Join(dir, "rel/t2") {
		t.Fatalf("relative path root %s", ls.Root)
	}
	if ok, err := tb.Exists(ctx); ok || err != nil {
		t.Fatalf("Exists on nothing = %v %v", ok, err)
	}
	// Opening writes nothing.
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("OpenStorage created %v", ents)
	}
	if _, err := Create(ctx, tb.Store(), "", Metadata{SchemaString: testSchema}, Protocol{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := tb.Exists(ctx); !ok || err != nil {
		t.Fatalf("Exists after Create = %v %v", ok, err)
	}
}

func TestClassifyOS(t *testing.T) {
	for _, c := range []struct {
		err       error
		transient bool
	}{
		{&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, true},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ETIMEDOUT}, true},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, false},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, false},
		{errors.New("plain"), false},
	} {
		err := classifyOS(c.err)
		if IsTransient(err) != c.transient {
			t.Errorf("%v: transient = %v", c.err, IsTransient(err))
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%v: cause lost", c.err)
		}
	}
	if !IsNotFound(classifyOS(&os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT})) {
		t.Error("ENOENT is not found")
	}
}
