# syntax=docker/dockerfile:1
# cdc-sink image: multi-stage, cgo build (confluent-kafka-go links its bundled, static librdkafka
# against glibc), distroless glibc runtime, non-root.
#   docker build --build-arg VERSION=$(git describe --always) -t cdc-sink .     (or: make docker)
#   docker run --rm cdc-sink version
# Builder and runtime are both Debian 12 (bookworm) so the binary's glibc requirement matches.

ARG GO_VERSION=1.26.11

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# gcc and libc headers are in the golang image; cgo is needed for confluent-kafka-go
ENV CGO_ENABLED=1 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags "-s -w -X main.Version=${VERSION}" -o /out/cdc-sink ./cmd/cdc-sink \
 && /out/cdc-sink version \
 && mkdir -p /out/data

# base (not static): glibc, libssl and CA certificates; user nonroot = 65532:65532
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/cdc-sink /usr/local/bin/cdc-sink
# default table location for the examples (mount a volume here)
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER 65532:65532
# /healthz /readyz /metrics /progress when http.listen is set (e.g. CDC_SINK_HTTP_LISTEN=0.0.0.0:8081)
EXPOSE 8081
ENTRYPOINT ["cdc-sink"]
CMD ["run", "--config", "/etc/cdc-sink/cdc-sink.yaml"]
