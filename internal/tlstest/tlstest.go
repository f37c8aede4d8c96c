// Package tlstest serves TLS endpoints for tests of what a client says about a peer's
// certificate.
package tlstest

import (
	"crypto/tls"
	"testing"
)

// Serve listens on 127.0.0.1 with cert, completes the TLS handshake of every connection (or
// lets the client abort it) and closes it; it returns the address. The listener is closed at
// the end of t.
func Serve(t testing.TB, cert tls.Certificate) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return l.Addr().String()
}
