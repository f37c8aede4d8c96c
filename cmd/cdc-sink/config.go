package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/merge"
	"io"
	"net"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cdcsink/cdc-sink/internal/redact"
	"github.com/cdcsink/cdc-sink/rules"
)

// Config is the `cdc-sink run` configuration (YAML). Every leaf key can be
// overridden by a flag named after its dotted path (--kafka.brokers) and by
// an environment variable CDC_SINK_<PATH> (CDC_SINK_KAFKA_BROKERS), with
// precedence flag > env > file > default. Lists are comma-separated and maps
// are k=v,k=v in flags and env vars; a map given there is merged into the
// file's map entry by entry (the same precedence per entry).
type Config struct {
	Sink       string      `yaml:"sink" doc:"sink name: txn appId, table owner, consumer group default, quarantine topic prefix"`
	InstanceID string      `yaml:"instance_id" doc:"stable name of this instance when several instances of the sink write one table (a pod name): its batch txn appId is <sink>@<instance_id>; empty: <sink> (one instance)"`
	Kafka      KafkaConf   `yaml:"kafka"`
	Table      TableConf   `yaml:"tables"`
	History    HistoryConf `yaml:"history"`
	Reg        RegConf     `yaml:"registry"`
	Batch      BatchConf   `yaml:"batch"`
	Quar       QuarConf    `yaml:"quarantine"`
	HTTP       HTTPConf    `yaml:"http"`
	Log        LogConf     `yaml:"log"`
	Merge      MergeConf   `yaml:"merge"`
	Schema     SchemaConf  `yaml:"schema"`
	Storage    StorageConf `yaml:"storage"`
	Maint      MaintConf   `yaml:"maintenance"`
	// Consistency: "transaction" gates every table commit on whole source
	// transactions (pipeline.Gated, docs/consistency.md).
	Consistency string `yaml:"consistency" doc:"eventual|transaction: transaction makes every table commit hold whole source transactions only (needs the connector's provide.transaction.metadata=true; docs/consistency.md)"`
	Tx          TxConf `yaml:"transactions"`
	// Group: the sink's tables form a consistency group whose cuts are
	// published in Tx.Manifest (docs/consistency.md).
	Group string       `yaml:"consistency_group" doc:"name of the consistency group the sink's tables form (needs consistency: transaction and transactions.manifest): cuts across them are published for readers (cdc-sink consistent-versions)"`
	Rules []rules.Rule `yaml:"rules" doc:"data-quality rules (docs/rules.md); as a flag or CDC_SINK_RULES: a YAML file holding them (replaces the file's)"`
}

// StorageConf configures the object store backends beyond the SDKs' standard
// chains (credentials, AWS_REGION, AWS_ENDPOINT_URL_S3, …). Every command
// reads it from CDC_SINK_STORAGE_* too; run also from its config file.
type StorageConf struct {
	S3 struct {
		Endpoint  string `yaml:"endpoint" doc:"S3 endpoint override (SeaweedFS, MinIO, R2…); default: the SDK's (AWS_ENDPOINT_URL_S3)"`
		Region    string `yaml:"region" doc:"S3 region override; default: the SDK's (AWS_REGION)"`
		PathStyle bool   `yaml:"path_style" doc:"path-style bucket addressing (SeaweedFS/MinIO-style endpoints)"`
		// a silent store (network partition) must become a retried timeout
		ResponseTimeout time.Duration `yaml:"response_timeout" doc:"longest wait for an S3 response once a request is sent (0: 2m); a store gone silent then fails the request as transient and the batch is retried"`
	} `yaml:"s3"`
	Azure struct {
		Endpoint string `yaml:"endpoint" doc:"Azure Blob endpoint override (Azurite: http://127.0.0.1:10000/devstoreaccount1)"`
		Account  string `yaml:"account" doc:"Azure storage account of az:// locations; default: AZURE_STORAGE_ACCOUNT"`
	} `yaml:"azure"`
	GCS struct {
		Endpoint string `yaml:"endpoint" doc:"GCS endpoint override (an emulator); default: the SDK's (STORAGE_EMULATOR_HOST)"`
	} `yaml:"gcs"`
}

func (c StorageConf) options() delta.StorageOptions {
	return delta.StorageOptions{
		S3:    delta.S3Options{Endpoint: c.S3.Endpoint, Region: c.S3.Region, PathStyle: c.S3.PathStyle, ResponseTimeout: c.S3.ResponseTimeout},
		Azure: delta.AzureOptions{Endpoint: c.Azure.Endpoint, Account: c.Azure.Account},
		GCS:   delta.GCSOptions{Endpoint: c.GCS.Endpoint},
	}
}

// storageOpts are the object store options of this process's commands:
// set by realMain from CDC_SINK_STORAGE_*, and by run from its config.
var storageOpts delta.StorageOptions

// storageFromEnv reads the storage.* keys from the environment.
func storageFromEnv(getenv func(string) string) (delta.StorageOptions, error) {
	cfg := defaultConfig()
	for _, l := range leaves(&cfg) {
		if !strings.HasPrefix(l.path, "storage.") {
			continue
		}
		if v := getenv(envName(l.path)); v != "" {
			if err := setLeaf(l, v); err != nil {
				return delta.StorageOptions{}, fmt.Errorf("%s: %w", envName(l.path), err)
			}
		}
	}
	return cfg.Storage.options(), nil
}

// SchemaConf says how tables follow the source's DDL (docs/types.md, "Type changes").
type SchemaConf struct {
	Widening      string `yaml:"widening" doc:"rewrite|type_widening|off: how a column whose source type widened is followed"`
	OnDropColumn  string `yaml:"on_drop_column" doc:"keep|drop: what happens to a table column the source dropped"`
	ColumnMapping string `yaml:"column_mapping" doc:"none|name: Delta column mapping of new tables (name: drops are metadata-only)"`
}

// KafkaConf configures the consumer.
type KafkaConf struct {
	Brokers    []string          `yaml:"brokers" doc:"bootstrap servers host:port"`
	Group      string            `yaml:"group" doc:"consumer group (default: the sink name)"`
	Topics     []string          `yaml:"topics" doc:"topics to consume"`
	TopicRegex string            `yaml:"topic_regex" doc:"consume every topic matching this regex"`
	Properties map[string]string `yaml:"properties" doc:"librdkafka properties passed through (TLS, SASL, ...)"`
	// UnreachableAfter: librdkafka reconnects by itself, so a short outage
	// needs no action; a long one should page.
	UnreachableAfter time.Duration `yaml:"unreachable_after" doc:"/readyz fails (and cdcsink_kafka_connected is 0) once no broker connection has been up for this long"`
}

// TableConf routes topics to tables.
type TableConf struct {
	PathTemplate string              `yaml:"path_template" doc:"table path for a topic: {topic} {prefix} {db} {schema} {table}"`
	Map          map[string]string   `yaml:"map" doc:"explicit topic → table path (wins over the template)"`
	KeyColumns   map[string][]string `yaml:"key_columns" doc:"topic or schema.table → key columns for records with a null key"`
	// ChangeDataFeed: tables the sink creates get Delta's Change Data Feed
	// (docs/history.md); an existing table without it is refused until
	// `cdc-sink table set-property DIR delta.enableChangeDataFeed=true`.
	ChangeDataFeed bool `yaml:"change_data_feed" doc:"create tables with Delta Change Data Feed (delta.enableChangeDataFeed; readChangeFeed / load_cdf); existing tables need table set-property first"`
	// Layout: "partition" writes one file per Kafka partition and scopes
	// the key index to this instance's partitions (merge.Options.PartitionAligned,
	// docs/table-layout.md); "batch" one file per batch. Default: partition
	// when instance_id is set (several instances), else batch.
	Layout string `yaml:"layout" doc:"data files per batch: partition (one per Kafka partition, key index of this instance's partitions only: several instances on one table) or batch (one file); default partition when instance_id is set, else batch"`
}

// partitionAligned resolves tables.layout.
func (c *Config) partitionAligned() bool {
	switch c.Table.Layout {
	case "partition":
		return true
	case "batch":
		return false
	}
	return c.InstanceID != ""
}

// TxConf configures consistency: transaction.
type TxConf struct {
	Topic          string `yaml:"topic" doc:"Debezium's transaction topic (<topic.prefix>.transaction); default: from kafka.topics when they share one prefix"`
	MaxHeldRecords int    `yaml:"max_held_records" doc:"records held back waiting for their transactions at most (0: 1,000,000); a larger transaction is applied in parts, with a warning"`
	MaxHeldBytes   int64  `yaml:"max_held_bytes" doc:"key+value bytes held back at most (0: 256 MiB)"`
	Manifest       string `yaml:"manifest" doc:"location of the consistency group's manifest (a path or URL, like a table's), e.g. lake/_groups/<group>"`
}

// txTopic is transactions.topic, or <prefix>.transaction when every
// configured topic is <prefix>.<schema>.<table> with one prefix.
func (c *Config) txTopic() string {
	if c.Tx.Topic != "" || c.Kafka.TopicRegex != "" {
		return c.Tx.Topic
	}
	prefix := ""
	for _, t := range c.Kafka.Topics {
		parts := strings.Split(t, ".")
		if len(parts) < 3 || isControlTopic(t) {
			continue
		}
		p := strings.Join(parts[:len(parts)-2], ".")
		if prefix != "" && p != prefix {
			return ""
		}
		prefix = p
	}
	if prefix == "" {
		return ""
	}
	return prefix + ".transaction"
}

// RegConf configures the schema registry (Avro).
type RegConf struct {
	URL      string `yaml:"url" doc:"Confluent-compatible registry URL (Apicurio: .../apis/ccompat/v7)"`
	Username string `yaml:"username"`
	Password string `yaml:"password" doc:"secret; prefer CDC_SINK_REGISTRY_PASSWORD"`
	CAFile   string `yaml:"ca_file" doc:"PEM CA bundle for https"`
	CertFile string `yaml:"cert_file" doc:"PEM client certificate, for a registry that requires mutual TLS (with key_file)"`
	KeyFile  string `yaml:"key_file" doc:"PEM private key of cert_file"`
	Insecure bool   `yaml:"insecure_skip_verify"`
}

// BatchConf is the micro-batch trigger.
type BatchConf struct {
	MaxRecords  int           `yaml:"max_records"`
	MaxBytes    int64         `yaml:"max_bytes"`
	MaxInterval time.Duration `yaml:"max_interval"`
	// Overlap reads, decodes and normalizes the next batch while one is
	// applied (pipeline.Runner.Overlap). Not with consistency: transaction,
	// whose gate reads the tables.
	Overlap bool `yaml:"overlap"`
	// MaxHeldBytes bounds the record bytes held with overlap: the batch
	// applied plus the one read (0: 2 × max_bytes).
	MaxHeldBytes int64 `yaml:"max_held_bytes"`
}

// QuarConf says where rejected records go.
type QuarConf struct {
	Topic string `yaml:"topic" doc:"quarantine topic (default <sink>.quarantine)"`
	File  string `yaml:"file" doc:"write to this file instead of a topic"`
}

// HTTPConf is the health/metrics listener.
type HTTPConf struct {
	Listen string `yaml:"listen" doc:"address for the status page / and /status.json, /healthz /readyz /metrics /progress (empty: off)"`
	Pprof  bool   `yaml:"pprof" doc:"also serve Go's /debug/pprof/ profiles on the listener (off by default: it exposes internals)"`
	// StatusValues shows quarantined records' bytes on the status page.
	StatusValues bool `yaml:"status_values" doc:"show quarantined records' key and value on the status page (off by default: rows can hold personal data)"`
}

// LogConf configures slog.
type LogConf struct {
	Level  string `yaml:"level" doc:"debug|info|warn|error"`
	Format string `yaml:"format" doc:"json|text"`
}

// MergeConf configures merge semantics.
type MergeConf struct {
	Truncate      string        `yaml:"truncate" doc:"apply|ignore: what a source TRUNCATE does"`
	ShutdownGrace time.Duration `yaml:"shutdown_grace" doc:"time to finish the current batch on SIGTERM"`
	RetryBudget   time.Duration `yaml:"retry_budget" doc:"how long transient storage failures of one batch are retried before the run stops"`
}

// MaintConf schedules table maintenance from the sidecar.
type MaintConf struct {
	OptimizeEvery time.Duration `yaml:"optimize_every" doc:"not built: any value other than 0 is refused (run cdc-sink table optimize on a schedule)"`
}

func defaultConfig() Config {
	return Config{
		Sink:   "cdc-sink",
		Table:  TableConf{PathTemplate: "lake/{prefix}/{schema}.{table}"},
		Batch:  BatchConf{MaxRecords: 10000, MaxBytes: 64 << 20, MaxInterval: time.Second, Overlap: true},
		Kafka:  KafkaConf{UnreachableAfter: 15 * time.Second},
		HTTP:   HTTPConf{Listen: "127.0.0.1:8081"},
		Log:    LogConf{Level: "info", Format: "json"},
		Merge:  MergeConf{Truncate: "apply", ShutdownGrace: 30 * time.Second, RetryBudget: 10 * time.Minute},
		Schema: SchemaConf{Widening: string(merge.WidenRewrite), OnDropColumn: string(merge.DropKeep), ColumnMapping: merge.ColumnMappingNone},
	}
}

// leaf is one overridable key.
type leaf struct {
	path string // dotted yaml path
	v    reflect.Value
	doc  string
}

func leaves(cfg *Config) []leaf {
	var out []leaf
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
				walk(p, fv)
				continue
			}
			out = append(out, leaf{path: p, v: fv, doc: f.Tag.Get("doc")})
		}
	}
	walk("", reflect.ValueOf(cfg).Elem())
	return out
}

func envName(path string) string {
	return "CDC_SINK_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(path))
}

// setLeaf parses s into the leaf's type.
func setLeaf(l leaf, s string) error {
	v := l.v
	switch v.Interface().(type) {
	case string:
		v.SetString(s)
	case bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case int, int64:
		n, err := parseSize(s)
		if err != nil {
			return err
		}
		v.SetInt(n)
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case []string:
		v.Set(reflect.ValueOf(splitNonEmpty(s, ",")))
	case map[string]string:
		// Merged entry by entry into the map from the file (or a lower
		// precedence source): CDC_SINK_KAFKA_PROPERTIES=sasl.password=...
		// must not drop the file's security.protocol.
		m := map[string]string{}
		for k, v := range v.Interface().(map[string]string) {
			m[k] = v
		}
		for _, kv := range splitNonEmpty(s, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("want k=v,k=v, got %q", kv)
			}
			m[k] = val
		}
		v.Set(reflect.ValueOf(m))
	case map[string][]string:
		// topic=col1|col2,topic2=col, merged like map[string]string
		m := map[string][]string{}
		for k, v := range v.Interface().(map[string][]string) {
			m[k] = v
		}
		for _, kv := range splitNonEmpty(s, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("want topic=col1|col2,..., got %q", kv)
			}
			m[k] = splitNonEmpty(val, "|")
		}
		v.Set(reflect.ValueOf(m))
	case []rules.Rule:
		// a file: the rules list is YAML, not a flag-sized value
		b, err := os.ReadFile(s)
		if err != nil {
			return fmt.Errorf("rules file: %w", err)
		}
		rs, err := rules.Parse(b, s)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(rs))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

var sizeRe = regexp.MustCompile(`^(\d+)\s*(KiB|MiB|GiB|KB|MB|GB|k|m|g)?$`)

func parseSize(s string) (int64, error) {
	m := sizeRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("not a number or size: %q", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	mult := map[string]int64{"": 1, "k": 1 << 10, "KiB": 1 << 10, "KB": 1000, "m": 1 << 20, "MiB": 1 << 20, "MB": 1e6,
		"g": 1 << 30, "GiB": 1 << 30, "GB": 1e9}[m[2]]
	return n * mult, nil
}

func splitNonEmpty(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loadConfig builds the configuration from defaults, the YAML file named by
// --config, CDC_SINK_* environment variables and flags, then validates it.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("cdc-sink run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "YAML configuration file")
	ls := leaves(&cfg)
	set := map[string]string{}
	for _, l := range ls {
		l := l
		fs.Func(l.path, l.doc, func(s string) error { set[l.path] = s; return nil })
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := applyYAML(&cfg, *file, b); err != nil {
			return nil, err
		}
	}
	ls = leaves(&cfg)
	for _, l := range ls {
		if s := getenv(envName(l.path)); s != "" {
			if err := setLeaf(l, s); err != nil {
				return nil, fmt.Errorf("config key %s (from %s): %w", l.path, envName(l.path), err)
			}
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, l := range ls {
			if l.path == k {
				if err := setLeaf(l, set[k]); err != nil {
					return nil, fmt.Errorf("config key %s (flag --%s): %w", k, k, err)
				}
			}
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// applyYAML sets the keys present in a YAML configuration file. Scalars are
// parsed like flags and environment variables (sizes such as 64MiB,
// durations such as 1s), and every error names the dotted key and the line.
func applyYAML(cfg *Config, file string, b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config %s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	byPath := map[string]leaf{}
	sections := map[string]bool{}
	for _, l := range leaves(cfg) {
		byPath[l.path] = l
		for p := l.path; strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			sections[p] = true
		}
	}
	var walk func(prefix string, n *yaml.Node) error
	walk = func(prefix string, n *yaml.Node) error {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil // "section:" with nothing under it
		}
		if n.Kind != yaml.MappingNode {
			what := "the file"
			if prefix != "" {
				what = "config key " + prefix
			}
			return fmt.Errorf("%s (%s line %d): want a mapping of keys", what, file, n.Line)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if l, ok := byPath[path]; ok {
				if err := setYAMLLeaf(l, v); err != nil {
					return fmt.Errorf("config key %s (%s line %d): %w", path, file, v.Line, err)
				}
				continue
			}
			if sections[path] {
				if err := walk(path, v); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("config key %s (%s line %d): unknown key", path, file, k.Line)
		}
		return nil
	}
	return walk("", doc.Content[0])
}

func setYAMLLeaf(l leaf, n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		l.v.Set(reflect.Zero(l.v.Type()))
		return nil
	}
	switch l.v.Interface().(type) {
	case []string, map[string]string, map[string][]string, []rules.Rule:
		return n.Decode(l.v.Addr().Interface())
	}
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a single value")
	}
	return setLeaf(l, n.Value)
}

var sinkNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (c *Config) validate() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("config key %s: %s", key, fmt.Sprintf(format, a...))
	}
	if !sinkNameRe.MatchString(c.Sink) {
		return bad("sink", "%q must be letters, digits, '.', '_' or '-'", c.Sink)
	}
	if l := c.Table.Layout; l != "" && l != "partition" && l != "batch" {
		return bad("tables.layout", "%q: must be partition or batch", l)
	}
	if c.InstanceID != "" && (!sinkNameRe.MatchString(c.InstanceID) || len(c.InstanceID) > 64) {
		return bad("instance_id", "%q must be at most 64 letters, digits, '.', '_' or '-'", c.InstanceID)
	}
	if _, err := rules.Compile(c.Rules); err != nil {
		return bad("rules", "%v", err)
	}
	if c.Maint.OptimizeEvery != 0 {
		// parsed but never scheduled: refused rather than silently ignored
		return bad("maintenance.optimize_every", "scheduled compaction is not built into run: run `cdc-sink table optimize DIR` on a schedule (docs/runbook.md)")
	}
	switch c.Consistency {
	case "", "eventual":
	case "transaction":
		if c.InstanceID != "" {
			return bad("consistency", "transaction runs one instance per sink: with instance_id set, instances split a table's partitions and none could see its transactions whole")
		}
		if c.txTopic() == "" {
			return bad("transactions.topic", "consistency: transaction needs the connector's transaction topic (<topic.prefix>.transaction): set transactions.topic")
		}
		if c.Tx.MaxHeldRecords < 0 || c.Tx.MaxHeldBytes < 0 {
			return bad("transactions.max_held_records", "the bounds must be ≥ 0 (0: the default)")
		}
	default:
		return bad("consistency", "%q is not eventual|transaction", c.Consistency)
	}
	if c.Group != "" {
		if !sinkNameRe.MatchString(c.Group) {
			return bad("consistency_group", "%q must be letters, digits, '.', '_' or '-'", c.Group)
		}
		if c.Consistency != "transaction" {
			return bad("consistency_group", "a consistency group needs consistency: transaction (its tables must hold whole transactions)")
		}
		if c.Tx.Manifest == "" {
			return bad("transactions.manifest", "consistency_group %s needs a manifest location (e.g. lake/_groups/%s)", c.Group, c.Group)
		}
		if _, err := checkLocation(c.Tx.Manifest); err != nil {
			return bad("transactions.manifest", "%v", err)
		}
	} else if c.Tx.Manifest != "" {
		return bad("transactions.manifest", "set without consistency_group")
	}
	if len(c.Kafka.Brokers) == 0 {
		return bad("kafka.brokers", "at least one broker is required")
	}
	for _, b := range c.Kafka.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return bad("kafka.brokers", "%q is not host:port", b)
		}
	}
	if len(c.Kafka.Topics) == 0 && c.Kafka.TopicRegex == "" {
		return bad("kafka.topics", "give topics or kafka.topic_regex")
	}
	if c.Kafka.TopicRegex != "" {
		if _, err := regexp.Compile(c.Kafka.TopicRegex); err != nil {
			return bad("kafka.topic_regex", "%v", err)
		}
	}
	if c.Table.PathTemplate == "" && len(c.Table.Map) == 0 {
		return bad("tables.path_template", "give a path template or tables.map")
	}
	if c.Table.PathTemplate != "" {
		// Checked as expanded for a typical topic: the placeholders only
		// fill in path segments, they cannot make a location valid.
		sample, _ := routeTemplate(c.Table.PathTemplate)("prefix.schema.table")
		if _, err := checkLocation(sample); err != nil {
			return bad("tables.path_template", "%q: %v", c.Table.PathTemplate, err)
		}
	}
	mapped := make([]string, 0, len(c.Table.Map))
	for topic := range c.Table.Map {
		mapped = append(mapped, topic)
	}
	sort.Strings(mapped)
	for _, topic := range mapped {
		if _, err := checkLocation(c.Table.Map[topic]); err != nil {
			return bad("tables.map", "topic %s: %v", topic, err)
		}
	}
	if err := c.History.validate(bad); err != nil {
		return err
	}
	if c.Batch.MaxRecords <= 0 {
		return bad("batch.max_records", "must be > 0")
	}
	if c.Batch.MaxBytes <= 0 {
		return bad("batch.max_bytes", "must be > 0")
	}
	if c.Batch.MaxInterval <= 0 {
		return bad("batch.max_interval", "must be > 0")
	}
	if c.Batch.MaxHeldBytes != 0 && c.Batch.MaxHeldBytes < c.Batch.MaxBytes {
		return bad("batch.max_held_bytes", "must be 0 (2 × max_bytes) or at least batch.max_bytes (%d)", c.Batch.MaxBytes)
	}
	if c.Kafka.UnreachableAfter <= 0 {
		return bad("kafka.unreachable_after", "must be > 0")
	}
	if c.HTTP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			return bad("http.listen", "%q is not host:port", c.HTTP.Listen)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", "%q is not debug|info|warn|error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		return bad("log.format", "%q is not json|text", c.Log.Format)
	}
	if _, err := merge.ParseWideningMode(c.Schema.Widening); err != nil {
		return bad("schema.widening", "%v", err)
	}
	if _, err := merge.ParseDropMode(c.Schema.OnDropColumn); err != nil {
		return bad("schema.on_drop_column", "%v", err)
	}
	if _, err := merge.ParseColumnMapping(c.Schema.ColumnMapping); err != nil {
		return bad("schema.column_mapping", "%v", err)
	}
	switch c.Merge.Truncate {
	case "apply", "ignore":
	default:
		return bad("merge.truncate", "%q is not apply|ignore", c.Merge.Truncate)
	}
	if c.Reg.URL != "" && !strings.HasPrefix(c.Reg.URL, "http://") && !strings.HasPrefix(c.Reg.URL, "https://") {
		return bad("registry.url", "%q must be http(s)://", redact.String(c.Reg.URL))
	}
	if (c.Reg.CertFile == "") != (c.Reg.KeyFile == "") {
		return bad("registry.cert_file", "cert_file and key_file go together (mutual TLS with the registry)")
	}
	return nil
}

// Redacted returns the configuration as YAML with secrets masked (for logs
// and /progress).
func (c *Config) Redacted() map[string]any {
	out := map[string]any{}
	cp := *c
	for _, l := range leaves(&cp) {
		val := l.v.Interface()
		switch v := val.(type) {
		case string:
			// Credentials can also hide in values (a registry URL with user:pass@).
			if redact.IsSecretKey(l.path) && v != "" {
				val = "***"
			} else {
				val = redact.String(v)
			}
		case []string:
			vv := make([]string, len(v))
			for i, s := range v {
				vv[i] = redact.String(s)
			}
			val = vv
		case map[string]string:
			mm := map[string]string{}
			for k, s := range v {
				if redact.IsSecretKey(k) {
					s = "***"
				}
				mm[k] = redact.String(s)
			}
			val = mm
		}
		out[l.path] = val
	}
	return out
}
