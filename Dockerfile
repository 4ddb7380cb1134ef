# One image for both components; the Deployment picks the process:
#   command: ["python", "-m", "webhook"]   or   ["python", "-m", "controller"]
# Build: docker build -t <registry>/elb-gate:<tag> .
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- build: install the package and its dependencies into a venv -------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/elb-gate
COPY pyproject.toml README.md ./
COPY elbgate ./elbgate
COPY webhook ./webhook
COPY controller ./controller
COPY certs ./certs
# The runtime needs neither pip nor setuptools: leave them behind.
RUN /opt/elb-gate/bin/pip install . \
    && /opt/elb-gate/bin/pip uninstall -y pip setuptools \
    && find /opt/elb-gate -name '__pycache__' -prune -exec rm -rf {} +

# --- runtime: the venv only, non-root, no build tools ------------------------
FROM ${PYTHON_IMAGE}
ENV PATH=/opt/elb-gate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same numeric ids the Deployments set (runAsUser/runAsGroup 10001), so
# runAsNonRoot can be verified by the kubelet.
RUN groupadd --system --gid 10001 elbgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin elbgate
COPY --from=build /opt/elb-gate /opt/elb-gate
USER 10001:10001
EXPOSE 8443 9090
CMD ["python", "-m", "webhook"]
