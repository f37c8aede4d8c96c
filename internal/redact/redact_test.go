package redact

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	cases := []struct{ in, secret string }{
		{"postgres://dbz:s3cr3t@127.0.0.1:5432/loja", "s3cr3t"},
		{"host=127.0.0.1 user=dbz password=hunter2 dbname=loja", "hunter2"},
		{"sasl.password=topsecret,sasl.username=bob", "topsecret"},
		{"basic.auth.user.info=alice:pw123", "pw123"},
		{`connect failed: http://alice:pw@registry:8080/apis/ccompat/v7`, "pw"},
		{`password: "quoted value"`, "quoted value"},
	}
	for _, c := range cases {
		got := String(c.in)
		if strings.Contains(got, c.secret) {
			t.Errorf("String(%q) = %q still contains %q", c.in, got, c.secret)
		}
		if !strings.Contains(got, "***") {
			t.Errorf("String(%q) = %q has no redaction marker", c.in, got)
		}
	}
	if got := String("plain text 127.0.0.1:9092"); got != "plain text 127.0.0.1:9092" {
		t.Errorf("changed harmless text: %q", got)
	}
}
