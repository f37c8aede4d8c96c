package source

import (
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// librdkafka's messages as the native stack's broker produced them (integration/secure_test.go).
func TestIsAuthFailure(t *testing.T) {
	cases := []struct {
		name string
		code kafka.ErrorCode
		msg  string
		want bool
	}{
		{"wrong password", kafka.ErrAuthentication, "sasl_ssl://127.0.0.1:29094/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512", true},
		{"untrusted CA", kafka.ErrSsl, "sasl_ssl://127.0.0.1:29094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed", true},
		{"client certificate refused", kafka.ErrTransport, "ssl://127.0.0.1:29095/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate: SSL alert number 42", true},
		{"connection refused", kafka.ErrTransport, "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused", false},
		{"all brokers down", kafka.ErrAllBrokersDown, "1/1 brokers are down", false},
		{"timed out", kafka.ErrTimedOut, "Local: Timed out", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := isAuthFailure(int(c.code), c.msg); got != c.want {
				t.Errorf("isAuthFailure(%v, %q) = %v, want %v", c.code, c.msg, got, c.want)
			}
		})
	}
}

// An authentication failure before any connection was up is a configuration error (Poll
// returns it); after one, the consumer keeps retrying and the status says why it is down.
func TestBrokerStateAuthFailed(t *testing.T) {
	var b brokerState
	t0 := time.Unix(1000, 0)
	b.set(true, t0) // NewConsumer's optimistic start value: not a connection
	ae := &AuthError{Detail: "sasl_ssl://h:1/bootstrap: SASL authentication error"}
	if b.authFailed(ae, t0.Add(time.Second)) {
		t.Fatal("never connected, but authFailed says it was")
	}
	if st := b.BrokerStatus; st.Up || !strings.Contains(st.AuthErr, "sasl_ssl://h:1") || !st.Since.Equal(t0.Add(time.Second)) {
		t.Fatalf("after the failure: %+v", st)
	}
	b.connected(t0.Add(2 * time.Second))
	if st := b.BrokerStatus; !st.Up || st.AuthErr != "" {
		t.Fatalf("connected: %+v", st)
	}
	if !b.authFailed(ae, t0.Add(3*time.Second)) {
		t.Fatal("connected before, but authFailed says it never was")
	}
	if !strings.Contains(ae.Error(), "kafka.properties") {
		t.Errorf("AuthError does not say where to look: %v", ae)
	}
}
