# syntax=docker/dockerfile:1
#
# spend-svc image. Build from the repository root:
#   docker build -f deploy/docker/spend-svc.Dockerfile -t tollgate/spend-svc:dev .
# Run (the configuration is mounted, secrets come from the environment):
#   docker run -p 4001:4001 -v "$PWD/spend.yaml:/etc/tollgate/spend.yaml:ro" \
#       -e TOLLGATE_MASTER_KEY=... -e DATABASE_URL=... tollgate/spend-svc:dev
# Extra arguments are appended to the entry point, so `... tollgate/spend-svc:dev --check`
# validates the mounted configuration and exits.

ARG DEBIAN_IMAGE=debian:12
ARG DEBIAN_RUNTIME_IMAGE=debian:12-slim

# ---- build: the same Debian packages the test runner installs ----------------------------
FROM ${DEBIAN_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config \
        libmicrohttpd-dev libcurl4-openssl-dev librdkafka-dev libjansson-dev libhiredis-dev \
        libpq-dev libyaml-dev libssl-dev libcmocka-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTG_WERROR=ON \
 && cmake --build build --target spend-svc tollgate-litellm-import -j"$(nproc)" \
 && install -D -m 0755 build/spend-svc/spend-svc /out/spend-svc \
 && install -D -m 0755 build/tools/tollgate-litellm-import /out/tollgate-litellm-import \
 && strip --strip-unneeded /out/spend-svc /out/tollgate-litellm-import

# ---- runtime: shared libraries only, no compiler, no shell tools added -------------------
FROM ${DEBIAN_RUNTIME_IMAGE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libmicrohttpd12 libcurl4 librdkafka1 libjansson4 libhiredis0.14 libpq5 libyaml-0-2 \
        libssl3 ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && groupadd --gid 10001 tollgate \
 && useradd --uid 10001 --gid 10001 --home-dir /var/lib/tollgate \
        --shell /usr/sbin/nologin --no-create-home tollgate \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/tollgate \
 && install -d -m 0755 /etc/tollgate
COPY --from=build /out/spend-svc /usr/local/bin/spend-svc
# The LiteLLM import tool (README "Bringing keys over from LiteLLM"): run it with
# --entrypoint /usr/local/bin/tollgate-litellm-import.
COPY --from=build /out/tollgate-litellm-import /usr/local/bin/tollgate-litellm-import

LABEL org.opencontainers.image.title="tollgate spend-svc" \
      org.opencontainers.image.description="Spend pipeline: exactly-once spend in Postgres, live counters in Redis, budgets, alerts"

# spend-svc keeps no local state; the directory is its working directory only.
WORKDIR /var/lib/tollgate
USER 10001:10001
EXPOSE 4001
STOPSIGNAL SIGTERM
# Health is probed over HTTP by the orchestrator (GET /health/liveness, /health/readiness),
# so the image carries no HTTP client.
ENTRYPOINT ["/usr/local/bin/spend-svc", "--config", "/etc/tollgate/spend.yaml"]
