#!/usr/bin/env python3
"""HTTPS + basic-auth front of the native stack's schema registry (scripts/stack/tls.sh).

Apicurio Registry 2.4.2 authenticates only through an OIDC server (Keycloak): its "basic auth"
exchanges client credentials for a token there. The stack has no identity server, so this
stdlib-only proxy terminates TLS, checks HTTP basic auth (one user; the password comes from
$REGISTRY_TLS_PASSWORD, never the command line) and forwards the request to the plain registry.
401 without credentials or with wrong ones; the password is never logged.

Usage: registry_tls_proxy.py --listen 127.0.0.1:8443 --upstream http://127.0.0.1:8080 \
         --cert server.pem --key server.key --user NAME [-- tag]
"""
import argparse
import base64
import hmac
import http.client
import http.server
import os
import ssl
import sys
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "authorization", "host", "content-length"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("tag", nargs="*")
    a = ap.parse_args()
    password = os.environ.get("REGISTRY_TLS_PASSWORD", "")
    if not password:
        sys.exit("REGISTRY_TLS_PASSWORD is not set")
    want = "Basic " + base64.b64encode(f"{a.user}:{password}".encode()).decode()
    up = urllib.parse.urlsplit(a.upstream)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # request line only: no headers, no credentials
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

        def _deny(self):
            body = b'{"error_code":401,"message":"Unauthorized"}'
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="cdc-sink stack registry"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _proxy(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            if not hmac.compare_digest(self.headers.get("Authorization", ""), want):
                self._deny()
                return
            hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            c = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
            try:
                c.request(self.command, self.path, body=body, headers=hdrs)
                r = c.getresponse()
                data = r.read()
            except OSError as e:
                data = ('{"error_code":502,"message":"upstream: %s"}' % e).encode()
                self.send_response(502)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            finally:
                c.close()
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _proxy

    host, port = a.listen.rsplit(":", 1)
    srv = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(a.cert, a.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("registry https proxy on https://%s -> %s" % (a.listen, a.upstream), file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
