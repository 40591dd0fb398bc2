# pty-broker: owns the PTYs of one Docker host. Build from the repository root:
#   docker build -f deploy/docker/pty-broker.Dockerfile -t ptyhub/pty-broker .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p pty-broker \
    && install -D target/release/pty-broker /out/pty-broker

FROM debian:bookworm-slim
# The broker stays root: it talks to the Docker socket (root-owned on most hosts) and, sharing
# the host's PID namespace, sends signals to session processes of any uid inside containers.
# `local` sessions would run as root too, so this image offers only the docker backend.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 tini \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/ptyhub-broker
COPY --from=build /out/pty-broker /usr/local/bin/pty-broker
ENV PTYHUB_BROKER_LISTEN=0.0.0.0:50061 \
    PTYHUB_BROKER_DATA_DIR=/var/lib/ptyhub-broker \
    PTYHUB_BROKER_BACKENDS=docker \
    PTYHUB_BROKER_LOG_JSON=true
VOLUME ["/var/lib/ptyhub-broker"]
EXPOSE 50061
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/pty-broker"]
