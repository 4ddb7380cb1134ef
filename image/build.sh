#!/usr/bin/env bash
# `make image`: the OCI image from Debian packages and the locked wheels, with no
# image registry (image/build.py says how). Writes .build/image/elb-gate-<appVersion>.oci.tar
# and its SBOM; `ctr -n k8s.io images import` names it docker.io/library/elb-gate:<appVersion>.
# Needs root and mmdebstrap + umoci (bash .ci/install-tools); PYTHON is the project's venv
# Python, whose locked pip downloads the wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
exec "$PYTHON" -m image.build "$@"
