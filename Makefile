# cdc-sink — developer entry points. `make help` lists them.
# Conventions: one target per line in `help`; tools are installed on demand into $(GOBIN);
# nothing here needs Docker (the native stack runs from Maven Central jars and Debian packages).

SHELL        := bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO           ?= go
# go.mod's toolchain line (the standard library's security fixes) wins over an older local Go:
# the go command fetches it from the module proxy once.
export GOTOOLCHAIN := auto
GOBIN        ?= $(shell $(GO) env GOPATH)/bin
STATICCHECK_VERSION ?= v0.8.2          # staticcheck 2026.2.2: supports Go 1.26
STATICCHECK  := $(GOBIN)/staticcheck
# -race on 2 cores: keep generous, a single package should never get near it (cmd/cdc-sink:
# ≈ 13–18 min under load with the Spark, network-namespace and disk-fault tests)
TEST_TIMEOUT ?= 30m
E2E_TIMEOUT  ?= 30m
PKGS         ?= ./...
# e2e tests live in integration/ behind the `e2e` build tag (see integration/README.md)
E2E_PKGS     ?= ./integration/...
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# ------------------------------------------------------------------ build
.PHONY: build
build: ## build ./cdc-sink (cgo: confluent-kafka-go with bundled librdkafka)
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags "-s -w -X main.Version=$(VERSION)" -o cdc-sink ./cmd/cdc-sink

# ------------------------------------------------------------------ checks and tests
.PHONY: fmt
fmt: ## gofmt -w all Go files
	gofmt -w $$(git ls-files -co --exclude-standard '*.go')

.PHONY: fmt-check
fmt-check: ## fail if a Go file is not gofmt-formatted
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet (also the gcs-tagged files and the e2e and soak suites)
	$(GO) vet $(PKGS)
	$(GO) vet -tags gcs ./cmd/cdc-sink ./delta/gcsstore
	$(GO) vet -tags 'e2e soak' $(E2E_PKGS)

$(STATICCHECK):
	GOFLAGS=-mod=mod $(GO) install honnef.co/go/tools/cmd/staticcheck@$(strip $(STATICCHECK_VERSION))

.PHONY: lint
lint: fmt-check vet $(STATICCHECK) ## gofmt check, go vet, staticcheck
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags gcs ./cmd/cdc-sink ./delta/gcsstore

.PHONY: unit
unit: venv stack-pg azurite ## go test -race (Delta read-back checks use the venv; verify/slots tests use Postgres; Azure tests Azurite)
	# CDC_SINK_NETNS=1: the network-fault tests must run (root + iproute2), not skip
	CDC_SINK_NETNS=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	# gs:// lives behind the gcs build tag (keeps the Google SDK out of the default binary)
	$(GO) test -race -count=1 -tags gcs -run 'TestGCS' ./cmd/cdc-sink

.PHONY: alerts-test
alerts-test: ## promtool check + unit tests of deploy/prometheus/alerts.yaml (Debian package prometheus); TestMonitoringAssets runs them too
	cd deploy/prometheus && promtool check rules alerts.yaml && promtool test rules alerts_test.yaml

.PHONY: vulncheck
vulncheck: ## govulncheck ./... against a local database built from the pinned golang.org/x/vulndb module (VULNDB_VERSION=latest for the newest reports)
	scripts/vulncheck.sh

.PHONY: fuzz-smoke
fuzz-smoke: ## every Fuzz target for FUZZTIME (default 10s) each; FUZZTIME=10m for a long run
	scripts/fuzz-smoke.sh

.PHONY: test
test: venv fmt-check vet vulncheck alerts-test unit fuzz-smoke e2e ## what CI runs: venv, gofmt check, vet, govulncheck, promtool rule tests, unit tests, fuzz smoke, then e2e on the native stack

# ------------------------------------------------------------------ end-to-end on the real stack
# Starts the native stack (idempotent; quick when warm), exports its endpoints
# (scripts/stack/env.sh) and runs the `e2e`-tagged tests in integration/. Skips, saying so,
# while integration/ has no tests yet. A stack that e2e started is stopped afterwards (data kept)
# unless E2E_KEEP_STACK=1; one that was already running is left alone.
.PHONY: e2e
e2e: ## end-to-end suite against the native stack (starts it)
	@if ! ls integration/*_test.go >/dev/null 2>&1; then \
	  echo "e2e: no tests in integration/ yet: skipped"; exit 0; fi; \
	scripts/venv.sh; \
	started=0; scripts/stack/status.sh >/dev/null 2>&1 || started=1; \
	scripts/stack/up.sh; \
	eval "$$(scripts/stack/env.sh)"; \
	rc=0; $(GO) test -v -tags e2e -count=1 -p 1 -timeout $(E2E_TIMEOUT) $(E2E_PKGS) || rc=$$?; \
	if [ $$rc != 0 ]; then scripts/stack/status.sh || true; fi; \
	if [ $$started = 1 ] && [ "$${E2E_KEEP_STACK:-0}" != 1 ]; then scripts/stack/down.sh || true; fi; \
	exit $$rc

# The soak (integration/soak_test.go, build tags e2e+soak, never in CI): the real stack under a
# steady load for DURATION with a random fault per round (kill -9 of a sink, Connect or the
# broker, the broker frozen, disk full) and verify = Postgres at every quiet point. Figures in
# the log and in SOAK_REPORT (JSON). Needs root for the disk-full faults (a tmpfs).
DURATION     ?= 30m
SOAK_REPORT  ?= soak-report.json
.PHONY: soak
soak: ## soak on the native stack: DURATION (30m) of load with random faults, verify at every quiet point (not in CI)
	scripts/venv.sh
	scripts/stack/up.sh
	eval "$$(scripts/stack/env.sh)"; \
	CDC_SINK_SOAK_DURATION=$(DURATION) CDC_SINK_SOAK_REPORT=$(abspath $(SOAK_REPORT)) \
	  $(GO) test -v -tags 'e2e soak' -count=1 -p 1 -timeout 4h -run '^TestSoak$$' $(E2E_PKGS)

# ------------------------------------------------------------------ native stack (no Docker)
# Postgres :55432, Kafka :9092, Connect :8083, registry :8080 on 127.0.0.1 (scripts/stack/common.sh
# lists the CDC_SINK_* variables that change them). scripts/stack/README.md has the details.
.PHONY: stack-up
stack-up: ## start Postgres, Kafka KRaft, schema registry, Kafka Connect + Debezium (idempotent)
	scripts/stack/up.sh

.PHONY: stack-down
stack-down: ## stop the native stack; WIPE=1 also deletes its data
	WIPE=$(or $(WIPE),0) scripts/stack/down.sh

.PHONY: stack-pg
stack-pg: ## start only the stack's PostgreSQL (idempotent; what `make unit` needs)
	CDC_SINK_STACK_SERVICES=postgres scripts/stack/up.sh

.PHONY: stack-status
stack-status: ## show the native stack's services and connectors
	scripts/stack/status.sh

.PHONY: stack-connectors
stack-connectors: ## register both Debezium connectors (json: loja.*, avro: loja_avro.*)
	scripts/stack/connector.sh register json
	scripts/stack/connector.sh register avro

.PHONY: stack-smoke
stack-smoke: ## stack-up + json connector + one change event end to end
	scripts/stack/smoke.sh

.PHONY: stack-fetch
stack-fetch: ## download the stack's jars into the cache only
	scripts/stack/fetch.sh >/dev/null

.PHONY: fixtures-real
fixtures-real: ## regenerate envelope/testdata/real from a private fresh stack
	scripts/venv.sh
	scripts/stack/capture-fixtures.sh

# ------------------------------------------------------------------ misc
.PHONY: venv
venv: ## Python venv with the independent Delta readers and Kafka clients (.venv)
	scripts/venv.sh

.PHONY: azurite
azurite: ## Azurite, the Azure Storage emulator, from npm into .cache/azurite (Azure backend tests)
	scripts/azurite.sh >/dev/null

.PHONY: docker
docker: ## docker build -t cdc-sink . (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t cdc-sink:$(VERSION) -t cdc-sink:latest .

.PHONY: docker-pins
docker-pins: ## print the base images' current digests; fails when the Dockerfile's pins are stale (needs a registry)
	scripts/docker-pins.sh --check

.PHONY: clean
clean: ## remove build outputs (not the stack: make stack-down WIPE=1)
	rm -f cdc-sink

# ------------------------------------------------------------------ benchmarks
# cdc-sink vs Spark Structured Streaming foreachBatch + MERGE (local[2], delta-spark) vs a delta-rs
# merge loop, each consuming its own copy of the same generated Debezium stream from Kafka, one at
# a time; then the correctness gate (the three tables equal each other and dbzgen's Expected()).
# Needs a Kafka broker (BENCH_BROKERS; `make stack-up` gives 127.0.0.1:9092), for Avro streams a
# Confluent-compatible registry (BENCH_REGISTRY; the stack's), and the venv; Spark's
# jars come from Maven Central through Ivy on the first run (cached in ~/.ivy2.5.2).
# bench/README.md explains the figures.
BENCH_BROKERS ?= 127.0.0.1:9092
BENCH_REGISTRY ?= http://127.0.0.1:8080/apis/ccompat/v7
BENCH_WORK    ?= /tmp/cdcsink-bench
BENCH_OUT     ?= bench/results
BENCH_RUN     := .venv/bin/python bench/harness.py run --brokers $(BENCH_BROKERS) --work $(BENCH_WORK)

.PHONY: bench
# The full set takes about 1 h on 2 cores (43 min of it at 10M rows, mostly Spark) and ~50 GB of disk
# for the three 10M-record topics and tables (BENCH_SIZES to choose).
BENCH_SIZES   ?= 100000 1000000 10000000
# streams per size: json-plain, json-schema, avro (each adds the size's time again)
BENCH_FORMATS ?= json-plain

bench: ## benchmarks vs Spark and delta-rs at 100k, 1M and 10M rows + mergebench curve → bench/results/<date>.{md,json,png}
	scripts/venv.sh
	.venv/bin/python bench/harness.py mergebench --work $(BENCH_WORK) --out $(BENCH_OUT)/raw --sizes 100000,1000000,3000000,10000000
	for n in $(BENCH_SIZES); do for f in $(BENCH_FORMATS); do \
	  $(BENCH_RUN) --out $(BENCH_OUT)/raw --format $$f --registry $(BENCH_REGISTRY) --size $$n --backlog 300000 --live 3000 --rate 100 --batch 10000 --late-distance 15000 --timeout 7200 --no-build || exit 1; \
	done; done
	.venv/bin/python bench/harness.py report --out $(BENCH_OUT)/raw --results $(BENCH_OUT)

.PHONY: bench-smoke
bench-smoke: ## small benchmark, all three contenders + correctness gate, schema'd JSON and Avro (5k rows, 20k events each; a few minutes)
	scripts/venv.sh
	@out=$$(mktemp -d /tmp/cdcsink-bench-smoke.XXXXXX); \
	$(BENCH_RUN) --out $$out/raw --format json-schema --size 5000 --backlog 18000 --live 2000 --rate 100 --batch 5000 && \
	$(BENCH_RUN) --out $$out/raw --format avro --registry $(BENCH_REGISTRY) --size 5000 --backlog 18000 --live 2000 --rate 100 --batch 5000 --no-build && \
	.venv/bin/python bench/harness.py report --out $$out/raw --results $$out && echo "bench-smoke: results in $$out"
