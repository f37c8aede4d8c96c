//go:build !gcs

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A table location that is not a local path or file:// URL is refused
// before anything is read or written: `replay --table gs://lake/orders`
// used to exit 0 after writing a local directory "gs:/lake/orders".
func TestTableLocationsRefusedBeforeWriting(t *testing.T) {
	ctx := context.Background()
	cwd := t.TempDir()
	t.Chdir(cwd)
	for _, k := range []string{"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_CONNECTION_STRING", "CDC_SINK_STORAGE_AZURE_ACCOUNT"} {
		t.Setenv(k, "") // az:// without an account is refused before any request
	}
	input := filepath.Join(t.TempDir(), "in.jsonl") // outside cwd: cwd must stay empty
	line := `{"topic":"dbz.public.orders","partition":0,"offset":0,"key":"{\"id\":1}","payload":"{\"op\":\"c\",\"after\":{\"id\":1},\"source\":{\"lsn\":1}}"}` + "\n"
	if err := os.WriteFile(input, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--table", "gs://lake/orders", "--from-file", input, "--quarantine-file", "q.jsonl"}, "built without Google Cloud Storage support"},
		{[]string{"replay", "--table", "foo://x", "--from-file", input}, `unsupported scheme "foo"`},
		{[]string{"replay", "--table", "s3:/lake/orders", "--from-file", input}, "malformed URL"},
		{[]string{"replay", "--table", "hdfs://nn/lake/orders", "--from-file", input}, `unsupported scheme "hdfs"`},
		{[]string{"table", "info", "abfss://c@acct.example.com/orders"}, "want account.dfs.core.windows.net"},
		{[]string{"diff", "lake/a", "az://c/orders"}, "az:// names no storage account"},
		{[]string{"verify", "--source-table", "public.orders", "--table", "gs://lake/orders"}, "built without Google Cloud Storage support"},
		{[]string{"quarantine", "redrive", "--file", input, "--table", "gs://lake/orders", "--requarantine", "r.jsonl"}, "built without Google Cloud Storage support"},
		{[]string{"demo", "--dir", "gs://lake"}, "built without Google Cloud Storage support"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := realMain(ctx, c.args, &out, &errb)
		loc := ""
		for i, a := range c.args {
			if strings.Contains(a, ":/") && (i == 0 || c.args[i-1] != "--from-file") {
				loc = a
			}
		}
		if code == 0 || !strings.Contains(errb.String(), c.want) || !strings.Contains(errb.String(), loc) {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and an error naming %s with %q", c.args, code, errb.String(), loc, c.want)
		}
		if ents, _ := os.ReadDir(cwd); len(ents) != 0 {
			t.Fatalf("%v created %v in the working directory", c.args, ents)
		}
	}
}

func TestConfigRefusesTableLocations(t *testing.T) {
	for _, c := range []struct {
		tmpl string
		m    map[string]string
		want string
	}{
		{"gs://lake/{schema}.{table}", nil, "tables.path_template"},
		{"foo://lake/{table}", nil, `unsupported scheme "foo"`},
		{"lake/{table}", map[string]string{"dbz.public.orders": "foo://b/orders"}, "tables.map: topic dbz.public.orders"},
	} {
		cfg := defaultConfig()
		cfg.Kafka.Topics = []string{"dbz.public.orders"}
		cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
		cfg.Table.PathTemplate = c.tmpl
		cfg.Table.Map = c.m
		err := cfg.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("template %q map %v: %v, want an error with %q", c.tmpl, c.m, err, c.want)
		}
	}
	cfg := defaultConfig()
	cfg.Kafka.Topics = []string{"dbz.public.orders"}
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	// s3:// is built (backend_s3.go): accepted without any request.
	cfg.Table.PathTemplate = "s3://lake/{schema}.{table}"
	if err := cfg.validate(); err != nil {
		t.Fatalf("s3:// template: %v", err)
	}
	cfg.Table.PathTemplate = "file:///data/lake/{schema}.{table}"
	if err := cfg.validate(); err != nil {
		t.Fatalf("file:// template: %v", err)
	}
	if got, _ := routeTemplate(cfg.Table.PathTemplate)("dbz.public.orders"); got != "/data/lake/public.orders" {
		t.Errorf("route = %q, want the local path", got)
	}
}
