# syntax=docker/dockerfile:1
# tickler's image: `docker build -t tickler .` (or `podman build`, `buildah
# bud`). A build stage compiles the release binary; the runtime is Debian
# slim with the three libraries it links (OpenSSL, zlib, and the CA
# certificates), a non-root user, and `tickler serve` by default.
# docs/deploy.md takes it on to Kubernetes or systemd.

FROM rust:1-bookworm AS build
WORKDIR /src
# librdkafka builds from source (its build needs cmake).
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked --bin tickler \
 && strip target/release/tickler

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 zlib1g ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 tickler \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin tickler
COPY --from=build /src/target/release/tickler /usr/local/bin/tickler
USER 65532:65532
EXPOSE 8080 9090
# tickler is its own PID 1: it handles SIGTERM and SIGINT (drain, finish
# the batches in hand, exit 0) and starts no child process to reap.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD ["/usr/local/bin/tickler", "probe", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/tickler"]
CMD ["serve"]
