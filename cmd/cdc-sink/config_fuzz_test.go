package main

import (
	"os"
	"strings"
	"testing"
)

// FuzzLoadConfig: any YAML file, environment value and flag value gives a
// configuration or an error naming the key — never a panic — and an
// accepted configuration validates again unchanged (loading is a function
// of its inputs).
func FuzzLoadConfig(f *testing.F) {
	if b, err := os.ReadFile("../../compose/cdc-sink.yaml"); err == nil {
		f.Add(b, "", "")
	}
	f.Add([]byte("sink: s\nkafka: {brokers: [a:1], topics: [t]}\n"), "5MiB", "--batch.max_records=7")
	f.Add([]byte("kafka:\n  properties: {sasl.password: x}\ntables: {map: {t: s3://b/p}}\n"), "k=v,k2=v2", "--schema.widening=off")
	f.Add([]byte("batch: {max_bytes: 1GB, max_interval: 2s}\nschema: {on_drop_column: drop, column_mapping: name}\n"), "", "--merge.truncate=ignore")
	f.Add([]byte("{"), "", "")
	f.Add([]byte("tables: [1, 2]\n"), "x", "--kafka.topics=")
	f.Fuzz(func(t *testing.T, yml []byte, env, flagArg string) {
		if len(yml) > 1<<16 {
			return
		}
		dir := t.TempDir()
		file := dir + "/c.yaml"
		if err := os.WriteFile(file, yml, 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			if k == "CDC_SINK_BATCH_MAX_BYTES" || k == "CDC_SINK_KAFKA_PROPERTIES" {
				return env
			}
			return ""
		}
		args := []string{"--config", file}
		if strings.HasPrefix(flagArg, "--") && !strings.ContainsAny(flagArg, "\x00") {
			args = append(args, flagArg)
		}
		var sink strings.Builder
		cfg, err := loadConfig(args, getenv, &sink)
		if err != nil {
			return
		}
		if err := cfg.validate(); err != nil {
			t.Fatalf("accepted configuration does not validate again: %v", err)
		}
	})
}
