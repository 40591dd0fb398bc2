# session-api: stateless records and placement on PostgreSQL. Build from the repository root:
#   docker build -f deploy/docker/session-api.Dockerfile -t ptyhub/session-api .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p session-api \
    && install -D target/release/session-api /out/session-api

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ptyhub
COPY --from=build /out/session-api /usr/local/bin/session-api
USER 10001:10001
ENV PTYHUB_SESSION_API_LISTEN=0.0.0.0:50051 \
    PTYHUB_SESSION_API_LOG_JSON=true
EXPOSE 50051
ENTRYPOINT ["/usr/local/bin/session-api"]
