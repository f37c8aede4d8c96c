package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

// librdkafka's endpoint in a connection error: "ssl://host:port/bootstrap".
var tlsEndpointRe = regexp.MustCompile(`(?:sasl_)?ssl://([^/\s]+)`)

// explainBrokerCert adds what is wrong with the broker's certificate to a
// start-time refusal whose TLS verification failed: librdkafka says only
// "certificate verify failed: … verify that ssl.ca.location is correctly
// configured", the same for an expired certificate, one of another CA and
// one for another host name. cdc-sink then opens one TLS connection itself,
// reads the broker's certificate without trusting it, and checks it against
// ssl.ca.location (or the system roots) at now. Other errors are returned
// as they are.
func explainBrokerCert(ctx context.Context, err error, props map[string]string, now time.Time) error {
	var ae *source.AuthError
	if !errors.As(err, &ae) || !strings.Contains(ae.Detail, "certificate verify failed") {
		return err
	}
	m := tlsEndpointRe.FindStringSubmatch(ae.Detail)
	if m == nil {
		return err
	}
	if why := brokerCertProblem(ctx, m[1], props["ssl.ca.location"], now); why != "" {
		return fmt.Errorf("%w: %s", err, why)
	}
	return err
}

// brokerCertProblem says what verification of addr's certificate against the
// CA file (or the system roots) finds wrong at now; "" when it cannot tell.
func brokerCertProblem(ctx context.Context, addr, caFile string, now time.Time) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// only to read the certificate it presents: nothing is sent on this connection
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}} //nolint:gosec // verified below
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	leaf := certs[0]
	subject := fmt.Sprintf("broker %s presents certificate %q", addr, leaf.Subject.String())
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Sprintf("%s, which expired at %s", subject, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Sprintf("%s, which is not valid before %s", subject, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	opts := x509.VerifyOptions{DNSName: host, CurrentTime: now, Intermediates: x509.NewCertPool()}
	for _, ic := range certs[1:] {
		opts.Intermediates.AddCert(ic)
	}
	from := "the system's roots"
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return ""
		}
		opts.Roots = x509.NewCertPool()
		if !opts.Roots.AppendCertsFromPEM(pem) {
			return ""
		}
		from = "ssl.ca.location " + caFile
	}
	_, err = leaf.Verify(opts)
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ua):
		return fmt.Sprintf("%s issued by %q, which %s does not trust", subject, leaf.Issuer.String(), from)
	case errors.As(err, &he):
		return fmt.Sprintf("%s, which is not valid for %s (%v)", subject, host, he)
	}
	return fmt.Sprintf("%s: %v", subject, err)
}
