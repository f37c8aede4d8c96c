#!/usr/bin/env bash
# Prints `export` lines describing the native stack's endpoints, for tests and shells:
#   eval "$(scripts/stack/env.sh)"
# The integration tests (integration/, build tag e2e) read these variables.
source "$(dirname "$0")/common.sh"
cat <<EOF2
export CDC_SINK_E2E=1
export CDC_SINK_PG_DSN='postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable'
export CDC_SINK_KAFKA_BROKERS='$KAFKA_BOOTSTRAP'
export CDC_SINK_CONNECT_URL='$CONNECT_URL'
export CDC_SINK_REGISTRY_URL='$CCOMPAT_URL'
export CDC_SINK_STACK_SCRIPTS='$STACK_SCRIPTS'
export CDC_SINK_STACK_DIR='$STACK_DIR'
export CDC_SINK_PYTHON='$STACK_ROOT/.venv/bin/python'
EOF2
# secure endpoints (tls.sh): file paths, never the passwords themselves
if tls_enabled; then
cat <<EOF2
export CDC_SINK_KAFKA_SASL_BROKERS='$KAFKA_SASL_BOOTSTRAP'
export CDC_SINK_KAFKA_SSL_BROKERS='$KAFKA_SSL_BOOTSTRAP'
export CDC_SINK_KAFKA_SASL_USER='$SCRAM_USER'
export CDC_SINK_KAFKA_SASL_PASSWORD_FILE='$TLS_DIR/scram.password'
export CDC_SINK_REGISTRY_TLS_URL='$REGISTRY_TLS_URL/apis/ccompat/v7'
export CDC_SINK_REGISTRY_TLS_USER='$REGISTRY_TLS_USER'
export CDC_SINK_REGISTRY_TLS_PASSWORD_FILE='$TLS_DIR/registry.password'
export CDC_SINK_REGISTRY_MTLS_URL='$REGISTRY_MTLS_URL/apis/ccompat/v7'
export CDC_SINK_TLS_DIR='$TLS_DIR'
EOF2
fi
