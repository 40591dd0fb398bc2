# gateway: REST, terminal WebSockets, gRPC-web and the web page. Build from the repository root:
#   docker build -f deploy/docker/gateway.Dockerfile -t ptyhub/gateway .
FROM node:22-bookworm-slim AS web
WORKDIR /src/web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY web/ ./
RUN npm run build

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gateway \
    && install -D target/release/gateway /out/gateway

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ptyhub
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY --from=web /src/web/dist /usr/share/ptyhub/web
USER 10001:10001
ENV PTYHUB_GATEWAY_LISTEN=0.0.0.0:8080 \
    PTYHUB_GATEWAY_STATIC_DIR=/usr/share/ptyhub/web \
    PTYHUB_GATEWAY_LOG_JSON=true
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway"]
