# shellcheck shell=bash
# Secure endpoints of the native stack (README.md, "TLS and SASL"). Sourced by up.sh, env.sh and
# status.sh; on unless CDC_SINK_STACK_TLS=0. Beside the PLAINTEXT listener and the plain registry
# (which the rest of the stack and the e2e suite keep using) it adds:
#   * a CA, a broker/server certificate (SAN 127.0.0.1, localhost), a client certificate for
#     mutual TLS, an expired client certificate and a second, untrusted CA (negative tests),
#     all made with openssl under $STACK_DIR/tls (PEM; Kafka reads PEM key stores directly);
#   * a Kafka SASL_SSL listener (SCRAM-SHA-512; the user is created after start through the
#     PLAINTEXT listener, which works for a fresh and an existing data dir alike) and an SSL
#     listener that requires a client certificate;
#   * the schema registry over HTTPS with basic auth: registry_tls_proxy.py, a TLS-terminating
#     reverse proxy in front of the registry (Apicurio 2.4.2 authenticates only through an OIDC
#     server, Keycloak; its "basic auth" is client credentials exchanged for an OIDC token),
#     and on a second port over mutual TLS (client certificates signed by the stack's CA).
# Passwords are random per stack dir, in files readable by root only.

TLS_DIR=$STACK_DIR/tls
SCRAM_USER=cdcsink
REGISTRY_TLS_USER=cdcsink

tls_enabled() { [ "$STACK_TLS" = 1 ]; }

# tls_secret FILE: prints the password in FILE, making a random one the first time.
tls_secret() {
  if [ ! -s "$1" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' 'xy' >"$1")
  fi
  cat "$1"
}

# tls_certs: the CA, certificates and passwords; idempotent (kept once made).
tls_certs() {
  local d=$TLS_DIR
  mkdir -p "$d"
  chmod 700 "$d"
  [ -s "$d/broker-keystore.pem" ] && [ -s "$d/expired.pem" ] && [ -s "$d/other-ca.pem" ] && return 0
  command -v openssl >/dev/null || die "openssl not found (apt-get install -y openssl)"
  log "making the stack CA and certificates in $d"
  (
    umask 077
    cd "$d"
    o() { openssl "$@" 2>>"$d/openssl.log" >/dev/null || die "openssl $1 failed: see $d/openssl.log"; }
    key() { o genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
    ca() { # NAME SUBJECT
      key "$1.key"
      o req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "$2" -out "$1.pem" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    }
    ca ca "/CN=cdc-sink stack CA"
    ca other-ca "/CN=cdc-sink untrusted CA"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    leaf() { # NAME SUBJECT EXTFILE
      key "$1.key"
      o req -new -key "$1.key" -subj "$2" -out "$1.csr"
      o x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 -extfile "$3" -out "$1.pem"
    }
    leaf broker "/CN=127.0.0.1" server.ext
    leaf client "/CN=cdc-sink" client.ext
    # expired: openssl x509 cannot date a certificate in the past; openssl ca can
    key expired.key
    o req -new -key expired.key -subj "/CN=cdc-sink-expired" -out expired.csr
    mkdir -p ca-db; : >ca-db/index.txt; echo 1000 >ca-db/serial
    cat >ca.cnf <<EOF
[ca]
default_ca = stack
[stack]
dir = $d/ca-db
database = \$dir/index.txt
serial = \$dir/serial
new_certs_dir = \$dir
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = client
[any]
commonName = supplied
[client]
extendedKeyUsage = clientAuth
EOF
    o ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem \
      -startdate 20200101000000Z -enddate 20200102000000Z -notext
    # Kafka's PEM key store: the private key (PKCS#8) then the certificate chain
    cat broker.key broker.pem ca.pem >broker-keystore.pem
    rm -f ./*.csr
  ) || exit 1
  tls_secret "$d/scram.password" >/dev/null
  tls_secret "$d/registry.password" >/dev/null
}

# tls_kafka_props: the extra server.properties lines (listeners are appended by up.sh).
tls_kafka_props() {
  cat <<EOF
# secure listeners (scripts/stack/tls.sh): SASL_SSL with SCRAM-SHA-512, and SSL with client certificates
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
EOF
}

# tls_scram_user: creates (or resets) the SCRAM-SHA-512 user through the PLAINTEXT listener.
# In KRaft the credentials live in the metadata log; `kafka-storage format --add-scram` only
# works on an empty data dir, the admin API works always.
tls_scram_user() {
  local pw; pw=$(tls_secret "$TLS_DIR/scram.password")
  local marker=$STACK_DIR/kafka/scram.done
  # same password and same data dir: nothing to do (a JVM start saved)
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$(sha256sum <"$TLS_DIR/scram.password")" ]; then return 0; fi
  log "creating the SCRAM-SHA-512 user $SCRAM_USER"
  "$JAVA" -Xmx128m -cp "$(java_cp "$KAFKA_LIBS")" -Dlog4j2.configurationFile="$STACK_DIR/kafka/log4j2.properties" \
    kafka.admin.ConfigCommand --bootstrap-server "$KAFKA_BOOTSTRAP" --alter --entity-type users \
    --entity-name "$SCRAM_USER" --add-config "SCRAM-SHA-512=[iterations=4096,password=$pw]" \
    >"$LOGS/kafka-scram.log" 2>&1 || { cat "$LOGS/kafka-scram.log" >&2; die "creating the SCRAM user failed"; }
  sha256sum <"$TLS_DIR/scram.password" >"$marker"
}

# start_registry_tls: the HTTPS + basic-auth proxy in front of the registry, and its mutual-TLS
# port (client certificates signed by the stack's CA, e.g. client.pem).
start_registry_tls() {
  local pidfile=$RUN/registry-tls.pid
  if pid_alive "$pidfile"; then log "registry https proxy already running on $REGISTRY_TLS_URL"; return 0; fi
  port_open "$REGISTRY_TLS_PORT" && die "port $REGISTRY_TLS_PORT is taken by another process (set CDC_SINK_REGISTRY_TLS_PORT)"
  port_open "$REGISTRY_MTLS_PORT" && die "port $REGISTRY_MTLS_PORT is taken by another process (set CDC_SINK_REGISTRY_MTLS_PORT)"
  command -v python3 >/dev/null || die "python3 not found"
  log "starting the registry https proxy on $REGISTRY_TLS_URL (mutual TLS on $REGISTRY_MTLS_URL)"
  : >"$LOGS/registry-tls.log"
  # the password goes through the environment, not the command line (ps shows that)
  REGISTRY_TLS_PASSWORD=$(tls_secret "$TLS_DIR/registry.password") \
  setsid nohup python3 -X pycache_prefix="$STACK_DIR/registry/pycache" "$STACK_SCRIPTS/registry_tls_proxy.py" \
    --listen "127.0.0.1:$REGISTRY_TLS_PORT" --upstream "$REGISTRY_URL" \
    --cert "$TLS_DIR/broker.pem" --key "$TLS_DIR/broker.key" --user "$REGISTRY_TLS_USER" \
    --mtls-listen "127.0.0.1:$REGISTRY_MTLS_PORT" --client-ca "$TLS_DIR/ca.pem" \
    -- cdc.sink.stack=registry-tls >>"$LOGS/registry-tls.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  WAIT_PIDFILE=$pidfile wait_until registry-tls "$STACK_TIMEOUT" port_open "$REGISTRY_TLS_PORT" \
    || { tail -20 "$LOGS/registry-tls.log" >&2; die "registry https proxy not ready"; }
  WAIT_PIDFILE=$pidfile wait_until registry-mtls "$STACK_TIMEOUT" port_open "$REGISTRY_MTLS_PORT" \
    || { tail -20 "$LOGS/registry-tls.log" >&2; die "registry mutual-TLS port not ready"; }
}

# registry_tls_ok: the proxy answers an authenticated request (status.sh).
registry_tls_ok() {
  # the password through a config on stdin, not the command line
  printf 'user = "%s:%s"\n' "$REGISTRY_TLS_USER" "$(cat "$TLS_DIR/registry.password")" \
    | curl -fsS -o /dev/null --max-time 5 --cacert "$TLS_DIR/ca.pem" -K - "$REGISTRY_TLS_URL/apis/ccompat/v7/subjects"
}
