#!/usr/bin/env bash
# Fetches the stack's jars from Maven Central into $CDC_SINK_STACK_CACHE with
# `mvn dependency:copy-dependencies` on the small poms in scripts/stack/poms/.
# Each pom lands in its own dir named after a hash of the pom, so a warm cache is a no-op and
# a version bump in a pom fetches a fresh dir. Prints nothing but the resolved dirs (KEY=DIR lines)
# on stdout, so callers can `eval "$(scripts/stack/fetch.sh)"`.
#
# Usage: scripts/stack/fetch.sh [kafka] [debezium] [apicurio-converter] [apicurio-registry] [hadoop-aws]
#        (default: all; hadoop-aws is for Spark reading s3:// tables in the e2e suite)
source "$(dirname "$0")/common.sh"

command -v mvn >/dev/null || die "mvn not found (apt-get install -y maven)"

# fetch_pom NAME [extra copy-dependencies args...]: echoes the cache dir holding NAME's jars.
fetch_pom() {
  local name=$1; shift
  local pom=$STACK_SCRIPTS/poms/$name.xml hash dir tmp t0
  [ -f "$pom" ] || die "no pom $pom"
  hash=$(sha256sum "$pom" | cut -c1-12)
  dir=$STACK_CACHE/$name-$hash
  if [ -f "$dir/.complete" ]; then echo "$dir"; return 0; fi
  t0=$(now_s)
  log "fetching $name jars from Maven Central (cold cache) ..."
  mkdir -p "$STACK_CACHE"
  tmp=$(mktemp -d "$STACK_CACHE/.tmp-$name-XXXXXX")
  if ! mvn -B -q -f "$pom" dependency:copy-dependencies \
        -DoutputDirectory="$tmp/libs" -DincludeScope=runtime "$@" >"$tmp/mvn.log" 2>&1; then
    cat "$tmp/mvn.log" >&2
    rm -rf "$tmp"
    die "mvn failed for $pom"
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  touch "$dir/.complete"
  log "fetched $name: $(ls "$dir/libs" | wc -l) jars in $(( $(now_s) - t0 ))s"
  echo "$dir"
}

# build_registry: echoes the cache dir holding a runnable Apicurio Registry
# (apicurio-registry-server-1-runner.jar + lib/), built by poms/apicurio-registry/pom.xml.
build_registry() {
  local pom=$STACK_SCRIPTS/poms/apicurio-registry/pom.xml hash dir tmp t0
  hash=$(sha256sum "$pom" | cut -c1-12)
  dir=$STACK_CACHE/apicurio-registry-$hash
  if [ -f "$dir/.complete" ]; then echo "$dir"; return 0; fi
  t0=$(now_s)
  log "building Apicurio Registry server from Maven Central jars (cold cache, a few minutes) ..."
  mkdir -p "$STACK_CACHE"
  tmp=$(mktemp -d "$STACK_CACHE/.tmp-apicurio-registry-XXXXXX")
  cp "$pom" "$tmp/pom.xml"
  if ! (cd "$tmp" && mvn -B -q package -DskipTests >"$tmp/mvn.log" 2>&1); then
    tail -50 "$tmp/mvn.log" >&2
    rm -rf "$tmp"
    die "Apicurio Registry build failed (CDC_SINK_REGISTRY_IMPL=mini runs the stand-in registry instead)"
  fi
  mkdir -p "$tmp/app"
  mv "$tmp/target/apicurio-registry-server-1-runner.jar" "$tmp/target/lib" "$tmp/app/"
  rm -rf "$tmp/target"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  touch "$dir/.complete"
  log "built Apicurio Registry in $(( $(now_s) - t0 ))s"
  echo "$dir"
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(kafka debezium apicurio-converter apicurio-registry hadoop-aws)
for w in "${want[@]}"; do
  case $w in
    kafka) echo "KAFKA_LIBS=$(fetch_pom kafka)/libs" ;;
    # Kafka's own jars and SLF4J come from the worker's classpath.
    debezium) echo "DEBEZIUM_LIBS=$(fetch_pom debezium -DexcludeGroupIds=org.apache.kafka,org.slf4j)/libs" ;;
    apicurio-converter) echo "APICURIO_CONVERTER_LIBS=$(fetch_pom apicurio-converter -DexcludeGroupIds=org.apache.kafka,org.slf4j)/libs" ;;
    apicurio-registry) echo "APICURIO_REGISTRY_APP=$(build_registry)/app" ;;
    # Spark (pyspark's jars/) already has Netty, HttpClient, commons-* and SLF4J.
    hadoop-aws) echo "HADOOP_AWS_LIBS=$(fetch_pom hadoop-aws -DexcludeGroupIds=io.netty,org.slf4j,org.apache.httpcomponents,commons-logging,commons-codec)/libs" ;;
    *) die "unknown component $w" ;;
  esac
done
