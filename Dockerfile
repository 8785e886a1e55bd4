# syntax=docker/dockerfile:1
#
# Switchyard's container images (docs/deploy.md). One file, three images:
#
#   docker build -t switchyard:cpu .                              the default: node-llama-cpp's CPU build only
#   docker build --target cuda -t switchyard:cuda .               node-llama-cpp's CUDA build, on NVIDIA's CUDA runtime
#   docker build --target pgbouncer -t switchyard-pgbouncer .     Debian's PgBouncer with deploy/pgbouncer/pgbouncer.ini
#
# The Switchyard images run as the unprivileged user 10001 and keep their data in
# /var/lib/switchyard (SWITCHYARD_DATA_DIR). The same image runs every role: the command and
# SWITCHYARD_ROLE choose (compose.yaml, deploy/k8s/). No model file is inside: mount them at
# /models (SWITCHYARD_MODELS_DIR) or pull them at start (SWITCHYARD_PULL_ON_START).
#
# These images were never built where this file was written (no container runtime there);
# test/deploy-files.test.ts checks this file's shape, test/topology.test.ts runs compose.yaml's
# processes with its settings.

ARG NODE_VERSION=22
# node-llama-cpp's CUDA build links the CUDA 13 runtime and cuBLAS (its fallback build: CUDA 12).
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

# Every dependency (TypeScript, Vite) and the build: dist/ (server, dashboard, GraphiQL).
FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
# The prebuilt llama.cpp binaries come with the npm packages; never download or compile one here.
ENV NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY dashboard ./dashboard
COPY graphiql ./graphiql
RUN npm run build

# The production dependencies only.
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
ENV NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# node-llama-cpp's CPU build for this architecture; the GPU builds (about 600 MB) are removed.
FROM deps AS deps-cpu
RUN keep="linux-$(node -p process.arch)" \
 && for d in node_modules/@node-llama-cpp/*; do [ "${d##*/}" = "$keep" ] || rm -rf "$d"; done

# node-llama-cpp's CUDA builds and the CPU build (x64 only: there is no other CUDA build).
FROM deps AS deps-cuda
RUN for d in node_modules/@node-llama-cpp/*; do \
      case "${d##*/}" in linux-x64|linux-x64-cuda|linux-x64-cuda-ext) ;; *) rm -rf "$d" ;; esac; \
    done

# PgBouncer in transaction mode (deploy/pgbouncer/): Debian's package, run as the unprivileged
# user 10002 (PgBouncer refuses to run as root).
FROM debian:bookworm-slim AS pgbouncer
RUN apt-get update \
 && apt-get install -y --no-install-recommends pgbouncer \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10002 pgbouncer \
 && useradd --system --uid 10002 --gid 10002 --no-create-home pgbouncer \
 && mkdir -p /run/pgbouncer && chown 10002:10002 /run/pgbouncer
COPY deploy/pgbouncer/pgbouncer.ini /etc/pgbouncer/pgbouncer.ini
COPY deploy/pgbouncer/entrypoint.sh /usr/local/bin/pgbouncer-entrypoint
USER 10002:10002
EXPOSE 6432
ENTRYPOINT ["/bin/sh", "/usr/local/bin/pgbouncer-entrypoint"]

# The GPU image (a second tag): the same application on NVIDIA's CUDA runtime. Needs the NVIDIA
# container toolkit on the host (docker run --gpus all; Kubernetes: nvidia.com/gpu).
FROM ${CUDA_IMAGE} AS cuda
COPY --from=build /usr/local/bin/node /usr/local/bin/node
RUN groupadd --system --gid 10001 switchyard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/switchyard --no-create-home switchyard \
 && mkdir -p /var/lib/switchyard /models && chown 10001:10001 /var/lib/switchyard
WORKDIR /app
COPY --from=deps-cuda /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json schema.graphql ./
COPY src/config/catalog.json ./src/config/catalog.json
ENV NODE_ENV=production \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    SWITCHYARD_DATA_DIR=/var/lib/switchyard \
    SWITCHYARD_GPU=cuda
USER 10001:10001
EXPOSE 8080
CMD ["node", "dist/main.js"]

# The default image: node-llama-cpp's CPU build only.
FROM node:${NODE_VERSION}-bookworm-slim AS cpu
RUN groupadd --system --gid 10001 switchyard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/switchyard --no-create-home switchyard \
 && mkdir -p /var/lib/switchyard /models && chown 10001:10001 /var/lib/switchyard
WORKDIR /app
COPY --from=deps-cpu /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json schema.graphql ./
COPY src/config/catalog.json ./src/config/catalog.json
ENV NODE_ENV=production \
    SWITCHYARD_DATA_DIR=/var/lib/switchyard \
    SWITCHYARD_GPU=off
USER 10001:10001
EXPOSE 8080
CMD ["node", "dist/main.js"]
