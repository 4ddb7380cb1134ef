# One image for both components; the Deployment picks the process:
#   command: ["python", "-m", "webhook"]   or   ["python", "-m", "controller"]
# and it carries the operator's CLI, `elb-gate`.
# Build: docker build --platform linux/amd64 -t <registry>/elb-gate:<tag> .
#    or: az acr build --registry <registry> --platform linux/amd64 --image elb-gate:<tag> .
# The same image as `make image` (built with no registry, image/build.py): Debian
# bookworm's python3 and ca-certificates, the venv /opt/elb-gate from the locked
# wheels (requirements/runtime.txt, hashes required), uid/gid 10001, the same entry points.
# The base is pinned by digest: the multi-platform index of debian:bookworm-slim as
# Docker Official Images published it (the build of 2026-08-03, as recorded in
# docker-library/repo-info, repos/debian/remote/bookworm-slim.md), so two builds of one
# commit start from the same bytes. To move to a newer build (Debian point releases and
# security updates), read the tag's current index digest (the `Digest:` line) and
# replace it here, then rebuild and test:
#   docker buildx imagetools inspect debian:bookworm-slim
# (or `crane digest debian:bookworm-slim`). `--build-arg DEBIAN_IMAGE=...` overrides it.
ARG DEBIAN_IMAGE=debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241

# --- build: the venv from the lock, then elb-gate without its dependencies -----
FROM ${DEBIAN_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/runtime.txt requirements/build.txt ./requirements/
# pip and setuptools from their own lock (build tools only, removed below).
RUN python3 -m venv /opt/elb-gate \
    && /opt/elb-gate/bin/pip install --require-hashes -r requirements/build.txt \
    && /opt/elb-gate/bin/pip install --require-hashes --only-binary=:all: -r requirements/runtime.txt
COPY pyproject.toml README.md ./
COPY elbgate ./elbgate
COPY client ./client
COPY webhook ./webhook
COPY controller ./controller
COPY certs ./certs
# The runtime needs neither pip nor setuptools: leave them behind.
RUN /opt/elb-gate/bin/pip install --no-deps --no-build-isolation . \
    && /opt/elb-gate/bin/pip uninstall -y pip setuptools

# --- runtime: Debian's python3, the venv, non-root ------------------------------
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/opt/elb-gate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same numeric ids the Deployments set (runAsUser/runAsGroup 10001), so
# runAsNonRoot can be verified by the kubelet.
RUN groupadd --system --gid 10001 elbgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin elbgate
COPY --from=build /opt/elb-gate /opt/elb-gate
USER 10001:10001
EXPOSE 8443 9090
CMD ["python", "-m", "webhook"]
