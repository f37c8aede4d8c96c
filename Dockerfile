# syntax=docker/dockerfile:1
# cdc-sink image: multi-stage, cgo build (confluent-kafka-go links its bundled, static librdkafka
# against glibc), distroless glibc runtime, non-root.
#   docker build --build-arg VERSION=$(git describe --always) -t cdc-sink .     (or: make docker)
#   docker run --rm cdc-sink version
# Builder and runtime are both Debian 12 (bookworm) so the binary's glibc requirement matches.

#
# Base images are pinned by digest (a tag moves; a digest is the image). The digests are the
# multi-platform index digests; `scripts/docker-pins.sh` prints the current ones for the tags
# named here (it needs a registry, which the project's CI machine does not reach) and
# `scripts/docker-pins.sh --check` says whether these are still current. Bump them deliberately.
#   golang:1.26-bookworm (Go 1.26.7, docker-library's record of 2026-08-19)
ARG GO_IMAGE=golang:1.26-bookworm@sha256:38f30937ff0751bd8c202e53556168b9093302ee6d591e7e65a9d1b84a9d360c
#   gcr.io/distroless/base-debian12:nonroot
ARG RUNTIME_IMAGE=gcr.io/distroless/base-debian12:nonroot@sha256:7f0c72cd138b442ae0deeb69c08b1acf5525439ba251a49ad93c320a061567e5

FROM ${GO_IMAGE} AS build
WORKDIR /src
# gcc and libc headers are in the golang image; cgo is needed for confluent-kafka-go.
# GOTOOLCHAIN=auto: go.mod's toolchain line (go1.26.11, the standard library's security fixes)
# wins over the image's Go; the go command fetches it from the module proxy and checks it
# against the checksum database, so the pinned image need not be rebuilt for each Go patch.
ENV CGO_ENABLED=1 GOFLAGS=-trimpath GOTOOLCHAIN=auto
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download && go version
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags "-s -w -X main.Version=${VERSION}" -o /out/cdc-sink ./cmd/cdc-sink \
 && /out/cdc-sink version \
 && mkdir -p /out/data

# base (not static): glibc, libssl and CA certificates; user nonroot = 65532:65532
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/cdc-sink /usr/local/bin/cdc-sink
# default table location for the examples (mount a volume here)
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER 65532:65532
# /healthz /readyz /metrics /progress when http.listen is set (e.g. CDC_SINK_HTTP_LISTEN=0.0.0.0:8081)
EXPOSE 8081
ENTRYPOINT ["cdc-sink"]
CMD ["run", "--config", "/etc/cdc-sink/cdc-sink.yaml"]
