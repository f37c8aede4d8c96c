// Package redact removes secrets (passwords in URLs and DSNs, SASL and
// registry credentials) from text before it reaches logs, metrics, /progress
// or error messages.
package redact

import (
	"regexp"
	"strings"
)

var (
	// scheme://user:password@host → scheme://user:***@host
	urlCreds = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):[^@/\s]+@`)
	// key=value pairs in DSNs and librdkafka/registry settings.
	kvSecret = regexp.MustCompile(`(?i)((?:password|passwd|pwd|secret|sasl\.password|basic\.auth\.user\.info|sasl\.oauthbearer\.client\.secret|ssl\.key\.password|token)\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&]+)`)
)

// String returns s with every credential it recognises replaced by ***.
func String(s string) string {
	if s == "" {
		return s
	}
	s = urlCreds.ReplaceAllString(s, "${1}:***@")
	return kvSecret.ReplaceAllString(s, "${1}***")
}

// IsSecretKey reports whether a configuration key names a secret.
func IsSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"password", "secret", "token", "user.info", "credentials", "dsn", "salt"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
