# shellcheck shell=bash
# Schema registry of the native stack. Sourced by up.sh. Two implementations, same APIs
# (Apicurio v2 REST at /apis/registry/v2 for the Apicurio AvroConverter, Confluent-compatible
# /apis/ccompat/v7 for consumers), chosen by CDC_SINK_REGISTRY_IMPL:
#   apicurio (default)  the real Apicurio Registry 2.4.2.Final server, re-augmented from the Maven
#                       Central jars by poms/apicurio-registry/pom.xml (README.md, "Schema
#                       registry"), H2 storage in a file under $STACK_DIR/registry
#   mini                mini_registry.py, a stdlib-only stand-in (no JVM, starts in < 1 s)
start_registry() {
  local pidfile=$RUN/registry.pid dir=$STACK_DIR/registry
  if pid_alive "$pidfile"; then log "registry already running on $REGISTRY_URL"; return 0; fi
  port_open "$REGISTRY_PORT" && die "port $REGISTRY_PORT is taken by another process (set CDC_SINK_REGISTRY_PORT)"
  mkdir -p "$dir"
  : >"$LOGS/registry.log"
  case $REGISTRY_IMPL in
    apicurio)
      ensure_java
      log "starting Apicurio Registry 2.4.2 on $REGISTRY_URL"
      # %prod.* keys: the app's own application.properties sets them per profile, and a profiled
      # key beats an unprofiled one whatever its source.
      REGISTRY_DATASOURCE_URL="jdbc:h2:file:$dir/h2/registry" \
      setsid nohup "$JAVA" -Xms64m -Xmx256m -XX:+UseSerialGC -Djava.awt.headless=true -Dcdc.sink.stack=registry \
        -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
        -D%prod.quarkus.datasource.jdbc.initial-size=2 -D%prod.quarkus.datasource.jdbc.min-size=2 \
        -D%prod.quarkus.datasource.jdbc.max-size=20 \
        -jar "$APICURIO_REGISTRY_APP/apicurio-registry-server-1-runner.jar" \
        >>"$LOGS/registry.log" 2>&1 </dev/null &
      ;;
    mini)
      command -v python3 >/dev/null || die "python3 not found"
      log "starting schema registry (mini_registry.py) on $REGISTRY_URL"
      # -X pycache_prefix keeps __pycache__ out of the source tree; the trailing arg tags the process as ours
      setsid nohup python3 -X pycache_prefix="$dir/pycache" "$STACK_SCRIPTS/mini_registry.py" \
        --host 127.0.0.1 --port "$REGISTRY_PORT" --state "$dir/state.json" --log-requests \
        -- cdc.sink.stack=registry >>"$LOGS/registry.log" 2>&1 </dev/null &
      ;;
    *) die "CDC_SINK_REGISTRY_IMPL must be apicurio or mini, not '$REGISTRY_IMPL'" ;;
  esac
  echo $! >"$pidfile"
  WAIT_PIDFILE=$pidfile wait_until registry "$STACK_TIMEOUT" http_ok "$CCOMPAT_URL/subjects" \
    || { tail -20 "$LOGS/registry.log" >&2; die "registry not ready"; }
}
