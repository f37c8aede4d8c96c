package dbzgen

import (
	"context"
	"reflect"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// TestAvroStreamMatchesJSON: every record of an Avro stream decodes to the
// event its schema'd-JSON twin decodes to (same kind, op, source, key and
// row values), for the envelope and the flattened form; malformed records
// stay malformed.
func TestAvroStreamMatchesJSON(t *testing.T) {
	for _, tc := range []struct{ plain, schema Format }{{JSONPlain, JSONSchema}, {UnwrapPlain, Unwrap}} {
		t.Run(tc.plain.String(), func(t *testing.T) {
			cfg := full(tc.plain, 3)
			plain := Generate(cfg).Records
			cfg.Format = tc.schema
			schema := Generate(cfg).Records
			if len(plain) != len(schema) {
				t.Fatalf("%d plain records, %d schema'd", len(plain), len(schema))
			}
			ac, err := NewAvroCodec(full(tc.plain, 3))
			if err != nil {
				t.Fatal(err)
			}
			reg := envelope.NewMemoryRegistry()
			ac.SetIDs(reg.Register(ac.KeySchema), reg.Register(ac.ValueSchema))
			dj := envelope.NewDecoder(envelope.Options{})
			da := envelope.NewDecoder(envelope.Options{Registry: reg})
			ctx := context.Background()
			n := 0
			for i, rec := range plain {
				ar, err := ac.Record(rec)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if ar.Value != nil && ar.Value[0] != 0 {
					t.Fatalf("record %d: not Confluent-framed", i)
				}
				want, werr := dj.Decode(ctx, schema[i])
				got, gerr := da.Decode(ctx, ar)
				if werr != nil || gerr != nil {
					wr, _ := quarantine.ReasonOf(werr)
					gr, _ := quarantine.ReasonOf(gerr)
					if (werr == nil) != (gerr == nil) || (wr == "") != (gr == "") {
						t.Fatalf("record %d: json err %v, avro err %v", i, werr, gerr)
					}
					continue
				}
				if got.Kind != want.Kind || got.Op != want.Op || got.Format != envelope.FormatAvro || got.Source != want.Source ||
					got.TsMs != want.TsMs || got.Deleted != want.Deleted || !reflect.DeepEqual(got.Tx, want.Tx) {
					t.Fatalf("record %d: avro %+v\njson %+v", i, got, want)
				}
				for _, p := range [][2]*envelope.Row{{got.Key, want.Key}, {got.Before, want.Before}, {got.After, want.After}} {
					if (p[0] == nil) != (p[1] == nil) {
						t.Fatalf("record %d: row presence differs", i)
					}
					if p[0] != nil && (!reflect.DeepEqual(p[0].Names, p[1].Names) || !reflect.DeepEqual(p[0].Values, p[1].Values)) {
						t.Fatalf("record %d: avro row %v %v\njson row %v %v", i, p[0].Names, p[0].Values, p[1].Names, p[1].Values)
					}
				}
				n++
			}
			if n < len(plain)/2 {
				t.Fatalf("only %d of %d records compared", n, len(plain))
			}
		})
	}
}
