package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// connectDecimal is the JSON form of a Connect Decimal: base64 of the
// big-endian two's-complement unscaled value.
func connectDecimal(unscaled int64) string {
	b := big.NewInt(unscaled).Bytes()
	if unscaled < 0 {
		// two's complement of the magnitude, one byte wider than needed
		n := new(big.Int).Lsh(big.NewInt(1), uint(8*(len(b)+1)))
		b = n.Add(n, big.NewInt(unscaled)).Bytes()
	} else if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func decimalField(name string, prec, scale int) dbzField {
	return dbzField{Name: name, Type: "bytes", Logical: "org.apache.kafka.connect.data.Decimal",
		Params: map[string]string{"scale": fmt.Sprint(scale), "connect.decimal.precision": fmt.Sprint(prec)}}
}

// TestReplayWidensColumns: for each widening pair, two records with the
// narrow type are committed first (a narrow data file), then the source's
// type widens (ALTER TABLE … TYPE): later records carry the wide type and a
// value only it can hold, and a redelivered record still has the narrow type.
// The table must follow: the column is widened in the same commit as the
// data (typeWidening feature, delta.typeChanges), nothing is quarantined,
// and delta-rs reads old and new files as the wide type.
func TestReplayWidensColumns(t *testing.T) {
	cases := []struct {
		name           string
		narrow, wide   dbzField
		v1, v2, v3, v4 any    // v1,v2 narrow; v3,v4 wide (v4 out of the narrow range); v5 = v2 narrow again
		want           [5]any // delta-rs canonical values of keys 1..5
		fromT, toT     string
	}{
		{"byte-short", dbzField{Name: "c", Type: "int8"}, dbzField{Name: "c", Type: "int16"},
			int8(7), int8(-8), int16(300), int16(-32000), [5]any{"300", "-8", "-32000", "-32000", "-8"}, "byte", "short"},
		{"short-integer", dbzField{Name: "c", Type: "int16"}, dbzField{Name: "c", Type: "int32"},
			int16(7), int16(-8), int32(70000), int32(-2000000000), [5]any{"70000", "-8", "-2000000000", "-2000000000", "-8"}, "short", "integer"},
		{"integer-long", dbzField{Name: "c", Type: "int32"}, dbzField{Name: "c", Type: "int64"},
			int32(7), int32(-8), int64(1) << 40, int64(-1) << 62, [5]any{"1099511627776", "-8", "-4611686018427387904", "-4611686018427387904", "-8"}, "integer", "long"},
		{"float-double", dbzField{Name: "c", Type: "float32"}, dbzField{Name: "c", Type: "float64"},
			0.5, -1.25, 1e300, -2.5e-300, [5]any{"1e+300", "-1.25", "-2.5e-300", "-2.5e-300", "-1.25"}, "float", "double"},
		{"integer-double", dbzField{Name: "c", Type: "int32"}, dbzField{Name: "c", Type: "float64"},
			int32(7), int32(-8), 0.25, 1e20, [5]any{"0.25", "-8.0", "1e+20", "1e+20", "-8.0"}, "integer", "double"},
		{"decimal(10,2)-decimal(12,4)", decimalField("c", 10, 2), decimalField("c", 12, 4),
			connectDecimal(1234), connectDecimal(-99999999), connectDecimal(123456789), connectDecimal(99999999_9999),
			[5]any{"12345.6789", "-999999.9900", "99999999.9999", "99999999.9999", "-999999.9900"}, "decimal(10,2)", "decimal(12,4)"},
		{"long-double", dbzField{Name: "c", Type: "int64"}, dbzField{Name: "c", Type: "float64"},
			int64(7), int64(-8), 0.5, -1e100, [5]any{"0.5", "-8.0", "-1e+100", "-1e+100", "-8.0"}, "long", "double"},
		{"date-timestamp", dbzField{Name: "c", Type: "int32", Logical: "io.debezium.time.Date"}, dbzField{Name: "c", Type: "int64", Logical: "io.debezium.time.MicroTimestamp"},
			int32(1), int32(-1), int64(1_500_000), int64(86_400_000_000) * 20000, [5]any{"1500000", "-86400000000", "1728000000000000", "1728000000000000", "-86400000000"}, "date", "timestamp"},
		{"integer-decimal(12,2)", dbzField{Name: "c", Type: "int32"}, decimalField("c", 12, 2),
			int32(7), int32(-8), connectDecimal(1234), connectDecimal(-99999999_99),
			[5]any{"12.34", "-8.00", "-99999999.99", "-99999999.99", "-8.00"}, "integer", "decimal(12,2)"},
	}
	type built struct {
		name string
		dir  string
		want [5]any
	}
	var tables []built
	base := t.TempDir() // outlives the subtests: Spark reads the tables at the end
	for _, mode := range []string{"rewrite", "type_widening"} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				tmp := filepath.Join(base, mode, strings.NewReplacer("(", "_", ")", "_", ",", "_").Replace(tc.name))
				if err := os.MkdirAll(tmp, 0o755); err != nil {
					t.Fatal(err)
				}
				dir := replayWidening(t, tmp, mode, tc.narrow, tc.wide, tc.v1, tc.v2, tc.v3, tc.v4, tc.want, tc.fromT, tc.toT)
				tables = append(tables, built{mode + "/" + tc.name, dir, tc.want})
			})
		}
	}
	// Spark (delta-spark 4, which implements typeWidening) reads every table,
	// old narrow files and new ones, in one session.
	dirs := make([]string, len(tables))
	for i, b := range tables {
		dirs[i] = b.dir
	}
	spark := deltacheck.ReadSpark(t, dirs...)
	for _, b := range tables {
		rows := deltacheck.ByKey(deltacheck.Decode(t, spark[b.dir].Rows), "id")
		for i, want := range b.want {
			if got := fmt.Sprint(rows[fmt.Sprint(i+1)]["c"]); !sameNumber(got, fmt.Sprint(want)) {
				t.Errorf("spark, %s: id %d column c = %s, want %v", b.name, i+1, got, want)
			}
		}
	}
}

func replayWidening(t *testing.T, tmp, mode string, narrowF, wideF dbzField, v1, v2, v3, v4 any, want [5]any, fromT, toT string) string {
	t.Helper()
	narrow := []dbzField{{Name: "id", Type: "int64"}, narrowF, {Name: "name", Type: "string"}}
	wide := []dbzField{{Name: "id", Type: "int64"}, wideF, {Name: "name", Type: "string"}}
	rec := func(off int64, op string, fields []dbzField, id int, v any) string {
		return dbzRecord(off, op, 100+off, fields, nil, map[string]any{"id": id, "c": v, "name": fmt.Sprint("n", id)}, map[string]any{"id": id})
	}
	in := filepath.Join(tmp, "in.jsonl")
	writeKcatLines(t, in,
		rec(0, "c", narrow, 1, v1),
		rec(1, "c", narrow, 2, v2),
		// the source widened the column here
		rec(2, "u", wide, 1, v3),
		rec(3, "c", wide, 3, v4),
		rec(4, "c", wide, 4, v4),
		rec(5, "c", narrow, 5, v2), // a record still in the old shape: cast to the table's type
	)
	table := filepath.Join(tmp, "t")
	qfile := filepath.Join(tmp, "q.jsonl")
	code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--quarantine-file", qfile,
		"--sink-name", "w", "--batch-records", "2", "--widening", mode, "--quiet")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "5 live rows") || !strings.Contains(out, " 0 quarantined") {
		t.Fatalf("replay: want 5 live rows and nothing quarantined:\n%s\n%s", out, errOut)
	}
	// long → double and date → timestamp are no metadata-only widenings in
	// Delta: rewritten in both modes.
	metaOnly := mode == "type_widening" && !(fromT == "long" && toT == "double") && !(fromT == "date" && toT == "timestamp")
	reader := "delta-rs"
	var rows map[string]map[string]any
	if metaOnly {
		// delta-rs 1.6 refuses the typeWidening feature: our reader here, Spark below
		checkWidened(t, table, "c", fromT, toT)
		reader = "cdc-sink"
		rows = ownRows(t, table)
	} else {
		checkRewritten(t, table, "c", toT)
		rows = deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, table, "").Rows), "id")
	}
	for i, w := range want {
		r, ok := rows[fmt.Sprint(i+1)]
		if !ok {
			t.Fatalf("%s: no row for id %d", reader, i+1)
		}
		got := fmt.Sprint(r["c"])
		// delta-rs renders like the expectations, exactly; our reader's text is compared by value
		if !sameNumber(got, fmt.Sprint(w)) || (!metaOnly && got != fmt.Sprint(w)) {
			t.Errorf("%s: id %d column c = %s, want %v", reader, i+1, got, w)
		}
	}
	return table
}

// checkWidened asserts the table's column has type to, a delta.typeChanges
// entry from → to, and the typeWidening feature.
func checkWidened(t *testing.T, dir, col, from, to string) {
	t.Helper()
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Protocol()
	if !slices.Contains(p.ReaderFeatures, "typeWidening") || !slices.Contains(p.WriterFeatures, "typeWidening") {
		t.Errorf("protocol %+v lacks typeWidening", p)
	}
	sc, err := snap.Schema()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sc.Fields {
		if f.Name != col {
			continue
		}
		if f.Type.TypeName() != to {
			t.Errorf("column %s has type %s, want %s", col, f.Type.TypeName(), to)
		}
		tc := fmt.Sprint(f.Metadata["delta.typeChanges"])
		if !strings.Contains(tc, "fromType:"+from) || !strings.Contains(tc, "toType:"+to) {
			t.Errorf("column %s delta.typeChanges = %s, want %s -> %s", col, tc, from, to)
		}
		return
	}
	t.Errorf("no column %s in %s", col, sc)
}

// checkRewritten asserts the column has type to and the table needs no
// reader feature beyond the ones every reader here supports.
func checkRewritten(t *testing.T, dir, col, to string) {
	t.Helper()
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := snap.Protocol(); slices.Contains(p.ReaderFeatures, "typeWidening") {
		t.Errorf("protocol %+v has typeWidening after a rewrite", p)
	}
	sc, err := snap.Schema()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sc.Fields {
		if f.Name == col && f.Type.TypeName() != to {
			t.Errorf("column %s has type %s, want %s", col, f.Type.TypeName(), to)
		}
	}
}

// ownRows reads id and c of every live row with our reader (tablerows).
func ownRows(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	tb, err := tablerows.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	err = tb.Scan(context.Background(), tablerows.ScanOptions{Columns: []string{"id", "c"}}, func(r tablerows.Row) error {
		out[tablerows.Text(r[0])] = map[string]any{"c": tablerows.Text(r[1])}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameNumber compares two renderings of a number exactly (12.34 = 12.3400, 1e+20 = 100000000000000000000).
func sameNumber(got, want string) bool {
	g, err1 := decimal.NewFromString(got)
	w, err2 := decimal.NewFromString(want)
	if err1 != nil || err2 != nil {
		return got == want
	}
	return g.Equal(w)
}

// schemalessRecord is a kcat line with a schemaless Debezium JSON value
// (JsonConverter schemas.enable=false) for public.items.
func schemalessRecord(offset int64, lsn int64, after map[string]any) string {
	value := map[string]any{"before": nil, "after": after, "op": "c", "ts_ms": 1700000000000 + lsn,
		"source": map[string]any{"version": "3.6.1.Final", "connector": "postgresql", "name": "dbz", "ts_ms": 1700000000000 + lsn,
			"snapshot": "false", "db": "app", "schema": "public", "table": "items", "txId": lsn, "lsn": lsn}}
	vb, _ := json.Marshal(value)
	kb, _ := json.Marshal(map[string]any{"id": after["id"]})
	b, _ := json.Marshal(map[string]any{"topic": "dbz.public.items", "partition": 0, "offset": offset, "headers": []any{},
		"payload": string(vb), "key": string(kb)})
	return string(b)
}

// TestReplaySchemalessWidening: docs/types.md's schemaless rule long + double
// → double holds for the table too — in one run ("weight":1 committed, then
// 3.14) and across runs (a fresh process infers 2 as long again: cast into
// the double column). Before, the 3.14 record and every later one were
// quarantined as schema_mismatch.
func TestReplaySchemalessWidening(t *testing.T) {
	tmp := t.TempDir()
	table := filepath.Join(tmp, "t")
	qfile := filepath.Join(tmp, "q.jsonl")
	in1 := filepath.Join(tmp, "in1.jsonl")
	writeKcatLines(t, in1,
		schemalessRecord(0, 100, map[string]any{"id": 1, "weight": 1}),
		schemalessRecord(1, 101, map[string]any{"id": 2, "weight": 2}),
		schemalessRecord(2, 102, map[string]any{"id": 3, "weight": 3.14}),
	)
	in2 := filepath.Join(tmp, "in2.jsonl")
	writeKcatLines(t, in2,
		schemalessRecord(3, 103, map[string]any{"id": 4, "weight": 4}),
	)
	for _, in := range []string{in1, in2} {
		code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--quarantine-file", qfile,
			"--sink-name", "w", "--batch-records", "2", "--quiet")
		if code != 0 || !strings.Contains(out, " 0 quarantined") {
			t.Fatalf("replay %s: exit %d, want 0 and nothing quarantined\n%s\n%s", filepath.Base(in), code, out, errOut)
		}
	}
	checkRewritten(t, table, "weight", "double")
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, table, "").Rows), "id")
	for id, want := range map[string]string{"1": "1.0", "2": "2.0", "3": "3.14", "4": "4.0"} {
		if got := fmt.Sprint(rows[id]["weight"]); got != want {
			t.Errorf("delta-rs: id %s weight = %s, want %s", id, got, want)
		}
	}
}

// TestReplayIncompatibleTypeChange: a change no widening covers (long →
// string), and any widening with --widening off, is quarantined as
// schema_mismatch naming the column, both types and the recovery path; the
// rows before it stay.
func TestReplayIncompatibleTypeChange(t *testing.T) {
	cases := []struct {
		name, mode string
		wide       dbzField
		v          any
		want       string
	}{
		{"long-string", "rewrite", dbzField{Name: "c", Type: "string"}, "forty", "column c: table has long, change has string: incompatible types"},
		{"long-double-off", "off", dbzField{Name: "c", Type: "float64"}, 0.5, "column c: table has long, change has double"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			narrow := []dbzField{{Name: "id", Type: "int64"}, {Name: "c", Type: "int64"}}
			wide := []dbzField{{Name: "id", Type: "int64"}, tc.wide}
			in := filepath.Join(tmp, "in.jsonl")
			writeKcatLines(t, in,
				dbzRecord(0, "c", 100, narrow, nil, map[string]any{"id": 1, "c": 5}, map[string]any{"id": 1}),
				dbzRecord(1, "c", 101, wide, nil, map[string]any{"id": 2, "c": tc.v}, map[string]any{"id": 2}),
			)
			table := filepath.Join(tmp, "t")
			qfile := filepath.Join(tmp, "q.jsonl")
			code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--quarantine-file", qfile,
				"--sink-name", "w", "--batch-records", "1", "--widening", tc.mode, "--quiet")
			if code != 0 || !strings.Contains(out, "1 live rows") || !strings.Contains(out, " 1 quarantined") {
				t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
			}
			q, err := os.ReadFile(qfile)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(q), `"schema_mismatch"`) || !strings.Contains(string(q), tc.want) || !strings.Contains(string(q), "table alter") {
				t.Errorf("quarantine entry lacks schema_mismatch / %q / the recovery hint:\n%s", tc.want, q)
			}
		})
	}
}

// TestReplayDropColumn: with --on-drop-column drop, a column the source
// dropped (the newest change's schema lacks it) is dropped from the table in
// the batch's commit; a redelivered older record that still carries it does
// not bring it back; a newer change carrying it again re-adds it (empty for
// the other rows). With keep (default) the column stays and new rows hold null.
func TestReplayDropColumn(t *testing.T) {
	full := []dbzField{{Name: "id", Type: "int64"}, {Name: "qty", Type: "int32"}, {Name: "name", Type: "string"}}
	less := []dbzField{{Name: "id", Type: "int64"}, {Name: "name", Type: "string"}}
	for _, variant := range []string{"keep", "drop", "drop/column-mapping"} {
		mode, colmap := variant, "none"
		if variant == "drop/column-mapping" {
			mode, colmap = "drop", "name"
		}
		t.Run(variant, func(t *testing.T) {
			tmp := t.TempDir()
			in := filepath.Join(tmp, "in.jsonl")
			writeKcatLines(t, in,
				dbzRecord(0, "c", 100, full, nil, map[string]any{"id": 1, "qty": 5, "name": "a"}, map[string]any{"id": 1}),
				dbzRecord(1, "c", 101, full, nil, map[string]any{"id": 2, "qty": 6, "name": "b"}, map[string]any{"id": 2}),
				// ALTER TABLE items DROP COLUMN qty
				dbzRecord(2, "u", 102, less, nil, map[string]any{"id": 1, "name": "a2"}, map[string]any{"id": 1}),
				dbzRecord(3, "c", 103, less, nil, map[string]any{"id": 3, "name": "c"}, map[string]any{"id": 3}),
				// a redelivered copy of offset 1 (older version): stale, and qty stays dropped
				dbzRecord(4, "c", 101, full, nil, map[string]any{"id": 2, "qty": 6, "name": "b"}, map[string]any{"id": 2}),
			)
			table := filepath.Join(tmp, "t")
			code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--quarantine-file", filepath.Join(tmp, "q.jsonl"),
				"--sink-name", "d", "--batch-records", "2", "--on-drop-column", mode, "--column-mapping", colmap, "--quiet")
			if code != 0 || !strings.Contains(out, "3 live rows") || !strings.Contains(out, " 0 quarantined") {
				t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
			}
			if colmap == "name" {
				checkMetadataOnlyDrop(t, table)
			}
			tb := deltacheck.ReadDeltaRS(t, table, "")
			hasQty := slices.Contains(tb.Columns, "qty")
			if hasQty != (mode == "keep") {
				t.Fatalf("%s: delta-rs columns %v", mode, tb.Columns)
			}
			rows := deltacheck.ByKey(deltacheck.Decode(t, tb.Rows), "id")
			if rows["1"]["name"] != "a2" || rows["3"]["name"] != "c" || rows["2"]["name"] != "b" {
				t.Fatalf("rows %v", rows)
			}
			if mode == "keep" && (rows["1"]["qty"] != nil || fmt.Sprint(rows["2"]["qty"]) != "6") {
				t.Fatalf("keep: qty of 1 should be null (updated without it), of 2 still 6: %v", rows)
			}
			if mode == "keep" {
				return
			}
			// the source adds qty back (a newer change carries it)
			in2 := filepath.Join(tmp, "in2.jsonl")
			writeKcatLines(t, in2,
				dbzRecord(5, "u", 105, full, nil, map[string]any{"id": 3, "qty": 9, "name": "c"}, map[string]any{"id": 3}))
			code, out, errOut = runCLI(t, "replay", "--from-file", in2, "--table", table, "--sink-name", "d", "--on-drop-column", mode, "--column-mapping", colmap, "--quiet")
			if code != 0 {
				t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
			}
			rows = deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, table, "").Rows), "id")
			if fmt.Sprint(rows["3"]["qty"]) != "9" || rows["2"]["qty"] != nil || rows["1"]["qty"] != nil {
				t.Fatalf("re-added qty: want 9 for id 3 and null (not the old 6) for 2 and 1: %v", rows)
			}
		})
	}
}

// checkMetadataOnlyDrop: a column-mapped table (mode name, physical names
// col-…) dropped its column in a commit that removed no data file.
func checkMetadataOnlyDrop(t *testing.T, dir string) {
	t.Helper()
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := snap.Config("delta.columnMapping.mode"); m != "name" || !slices.Contains(snap.Protocol().WriterFeatures, "columnMapping") {
		t.Fatalf("table is not column-mapped: mode %q, protocol %+v", m, snap.Protocol())
	}
	sc, _ := snap.Schema()
	if f, _ := sc.Field("name"); f == nil || !strings.HasPrefix(fmt.Sprint(f.Metadata["delta.columnMapping.physicalName"]), "col-") {
		t.Fatalf("column name has no physical name: %v", f)
	}
	logs, err := filepath.Glob(filepath.Join(dir, "_delta_log", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "droppedColumns") {
			continue
		}
		// removes are allowed only as deletion-vector swaps (the same path added back)
		added, removed := map[string]bool{}, []string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var a struct {
				Add    *struct{ Path string } `json:"add"`
				Remove *struct{ Path string } `json:"remove"`
			}
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatal(err)
			}
			if a.Add != nil {
				added[a.Add.Path] = true
			}
			if a.Remove != nil {
				removed = append(removed, a.Remove.Path)
			}
		}
		for _, r := range removed {
			if !added[r] {
				t.Fatalf("%s: the drop commit rewrote %s (want a metadata-only drop)", filepath.Base(l), r)
			}
		}
		return
	}
	t.Fatal("no commit dropped a column")
}
