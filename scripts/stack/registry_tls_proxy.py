#!/usr/bin/env python3
"""HTTPS + basic-auth front of the native stack's schema registry (scripts/stack/tls.sh).

Apicurio Registry 2.4.2 authenticates only through an OIDC server (Keycloak): its "basic auth"
exchanges client credentials for a token there. The stack has no identity server, so this
stdlib-only proxy terminates TLS, checks HTTP basic auth (one user; the password comes from
$REGISTRY_TLS_PASSWORD, never the command line) and forwards the request to the plain registry.
401 without credentials or with wrong ones; the password is never logged.

With --mtls-listen ADDR --client-ca CA.pem it also serves a second port that requires a client
certificate signed by that CA (mutual TLS; the certificate is the credential there, no basic
auth): the handshake fails without one.

Usage: registry_tls_proxy.py --listen 127.0.0.1:8443 --upstream http://127.0.0.1:8080 \
         --cert server.pem --key server.key --user NAME \
         [--mtls-listen 127.0.0.1:8444 --client-ca ca.pem] [-- tag]
"""
import argparse
import base64
import hmac
import http.client
import http.server
import os
import ssl
import sys
import threading
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
    ap.add_argument("--mtls-listen", default="")
    ap.add_argument("--client-ca", default="")
    ap.add_argument("tag", nargs="*")
    a = ap.parse_args()
    password = os.environ.get("REGISTRY_TLS_PASSWORD", "")
    if not password:
        sys.exit("REGISTRY_TLS_PASSWORD is not set")
    want = "Basic " + base64.b64encode(f"{a.user}:{password}".encode()).decode()
    up = urllib.parse.urlsplit(a.upstream)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        basic_auth = True  # the mutual-TLS port's handler says False

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
            if self.basic_auth and not hmac.compare_digest(self.headers.get("Authorization", ""), want):
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

    class MTLSHandler(Handler):
        basic_auth = False

    def serve(listen, handler, client_ca):
        host, port = listen.rsplit(":", 1)
        srv = http.server.ThreadingHTTPServer((host, int(port)), handler)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(a.cert, a.key)
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        print("registry https proxy on https://%s%s -> %s" % (listen, " (mutual TLS)" if client_ca else "", a.upstream),
              file=sys.stderr, flush=True)
        return srv

    if a.mtls_listen:
        if not a.client_ca:
            sys.exit("--mtls-listen needs --client-ca")
        threading.Thread(target=serve(a.mtls_listen, MTLSHandler, a.client_ca).serve_forever, daemon=True).start()
    serve(a.listen, Handler, "").serve_forever()


if __name__ == "__main__":
    main()
