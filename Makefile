# elb-gate — every target is listed by `make help`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
OVERLAY ?= manifests/overlays/generated
IMAGE ?= elb-gate:0.1.0
# The lock files (requirements/*.txt, with hashes) are made by uv at this version: `make lock`.
UV_VERSION := 0.13.8
UV_DIR := .build/uv-$(UV_VERSION)
UV := $(UV_DIR)/bin/uv
LOCK := $(UV) pip compile --quiet --generate-hashes --universal --python-version 3.11 --custom-compile-command 'make lock'
# Helm is built from its Go module (pinned), once, into .build/ (git-ignored):
# no binary download, and a second `make test` finds it there.
HELM_VERSION := v3.22.0
HELM_K8S_MINOR := 37
HELM := .build/helm-$(HELM_VERSION)/helm
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)
# The Kubernetes release of the test control plane (localkube) and of the kubectl
# the tests drive: `make test KUBE_VERSION=v1.34.4` runs the suite on another one.
KUBE_VERSION ?= v1.37.2
export KUBE_VERSION
LOCALKUBE := .build/localkube-$(KUBE_VERSION)/localkube
LOCALKUBE_SYSTEM := .build/localkube-$(KUBE_VERSION)/kubelet
LOCALKUBE_SOURCES := $(wildcard localkube/*.go localkube/cmd/*/*.go) localkube/go.mod localkube/go.sum localkube/build.sh

.DEFAULT_GOAL := help

help: ## List every target
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort | awk -F'\t' '{printf "  %-12s %s\n", $$1, $$2}'

# Progress is shown (pip's own lines): the first run downloads for a minute or two.
# Every dependency comes from the lock files, checked against their hashes; then
# elb-gate itself, editable, with the locked setuptools and nothing else.
$(STAMP): pyproject.toml requirements/build.txt requirements/dev.txt
	@echo "==> creating the virtualenv $(VENV) (first run only)"
	$(PY) -m venv $(VENV)
	@echo "==> pip and setuptools from requirements/build.txt"
	$(BIN)/pip install --progress-bar on --require-hashes -r requirements/build.txt
	@echo "==> the test dependencies from requirements/dev.txt, then elb-gate (editable) into $(VENV)"
	$(BIN)/pip install --progress-bar on --require-hashes -r requirements/dev.txt
	$(BIN)/pip install --no-deps --no-build-isolation -e .
	@touch $(STAMP)
	@echo "==> $(VENV) ready"

venv: $(STAMP) ## Create the virtualenv and install everything
	@true

tools: ## Install system tools the tests use (promtool) when missing
	@bash .ci/install-tools

$(LOCALKUBE): $(LOCALKUBE_SOURCES)
	@bash localkube/build.sh $(KUBE_VERSION) $(dir $(LOCALKUBE))

localkube: $(LOCALKUBE) ## Build the test control plane and its kubectl (KUBE_VERSION=...); cached
	@true

cluster: $(STAMP) $(LOCALKUBE) ## Start a control plane and keep it up (tests reuse it: ELB_GATE_CONTROL_PLANE=.run/cluster)
	$(BIN)/python -m testbed.cluster --dir .run/cluster $(ARGS)

lint: $(STAMP) ## ruff (lint + format), mypy, the layering contracts (import-linter), the docs' links
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m tests.doc_links

$(HELM):
	@echo "==> building helm $(HELM_VERSION) from the Go module proxy into $(dir $(HELM)) (once; a few minutes)"
	GOBIN=$(abspath $(dir $(HELM))) GOFLAGS=-mod=mod go install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm: $(HELM) ## Build the pinned helm into .build/ (used by the chart tests and `make manifests`)
	@$(HELM) version --short

manifests: $(STAMP) $(HELM) ## Render manifests/ from charts/elb-gate (the chart is the one source; commit both)
	ELB_GATE_HELM=$(abspath $(HELM)) $(BIN)/python -m manifests.generate

test: $(STAMP) tools $(HELM) $(LOCALKUBE) lint ## Lint, then the whole test suite on the real control plane (the README's test command)
	@echo "==> Kubernetes $(KUBE_VERSION): kubectl $$($(dir $(LOCALKUBE))kubectl version --client -o json | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') ($(dir $(LOCALKUBE))kubectl), $$($(HELM) version --short)"
	ELB_GATE_HELM=$(abspath $(HELM)) $(BIN)/pytest -q --ignore=tests/system $(ARGS)
	@echo "==> the system tier (real kubelet nodes, root) is not part of make test: make test-system"

$(LOCALKUBE_SYSTEM): $(LOCALKUBE_SOURCES)
	@bash localkube/build.sh $(KUBE_VERSION) $(dir $(LOCALKUBE)) --system

localkube-system: $(LOCALKUBE_SYSTEM) ## Build localkube with the system tier's kubelet and pause (the kubelet shares localkube's compiled packages)

test-system: $(STAMP) tools $(HELM) $(LOCALKUBE_SYSTEM) ## The system tier (root): the chart installed as shipped on real kubelet nodes, with the image (make image)
	ELB_GATE_SYSTEM_TIER=required ELB_GATE_HELM=$(abspath $(HELM)) $(BIN)/pytest -q -s tests/system $(ARGS)

# ARGS=--system-tier also needs the real kubelet and helm (and root).
RUN_SYSTEM_TIER := $(if $(findstring --system-tier,$(ARGS)),$(LOCALKUBE_SYSTEM) $(HELM))

run: $(STAMP) $(LOCALKUBE) $(RUN_SYSTEM_TIER) ## Run the whole system on a real control plane, default settings (ARGS=--once: exit after the summary; ARGS=--system-tier: the chart as shipped on real kubelet nodes, root)
	ELB_GATE_HELM=$(abspath $(HELM)) $(BIN)/python -m testbed.demo $(ARGS)

dashboard-png: $(STAMP) $(LOCALKUBE) tools ## Redraw docs/dashboard.png: the Grafana dashboard over a run of `make run`, scraped by Prometheus
	$(BIN)/python -m testbed.demo --once --dashboard docs/dashboard.png

certs: $(STAMP) ## Generate CA + serving certificate and the caBundle overlay (git-ignored)
	$(BIN)/python -m certs $(ARGS)

dist: $(STAMP) ## The CLI and the product as a wheel and an sdist in dist/ (pipx install dist/elb_gate-*.whl; docs/cli.md)
	$(BIN)/python -m image.dist

bench: $(STAMP) $(LOCALKUBE) ## Benchmarks on the real control plane: ratios against the floor, API load, handoff, reclaim; writes bench/results.json (ARGS=--quick: tiny)
	$(BIN)/python -m bench $(ARGS)

soak: $(STAMP) $(LOCALKUBE) ## Long randomized reliability runs on the real control plane (>= 1,000 schedules, >= 1,000 race histories checked for linearizability); writes tests/reliability/RESULTS.md
	$(BIN)/python -m testbed.reliability.soak $(ARGS)

fuzz: $(STAMP) ## Coverage-guided fuzzing of the admission decoding and decisions (atheris)
	$(BIN)/pip install -q atheris
	$(BIN)/python -m testbed.reliability.fuzz $(ARGS)

deploy: ## Apply an overlay to the current cluster (OVERLAY=..., default: the `make certs` one) and wait
	kubectl apply -k $(OVERLAY)
	kubectl -n elb-system rollout status deployment/elb-gate-webhook --timeout=180s
	kubectl -n elb-system rollout status deployment/elb-gate-controller --timeout=180s

$(UV): | $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check --target $(UV_DIR) uv==$(UV_VERSION)

lock: $(UV) ## Regenerate requirements/*.txt from pyproject.toml (keeps pins; ARGS=--upgrade moves them)
	$(LOCK) $(ARGS) pyproject.toml -o requirements/runtime.txt
	$(LOCK) $(ARGS) -c requirements/runtime.txt --extra test pyproject.toml -o requirements/dev.txt
	$(LOCK) $(ARGS) requirements/build.in -o requirements/build.txt

image: $(STAMP) ## The OCI image, built here from Debian packages and the lock (root): .build/image/elb-gate-<appVersion>.oci.tar + SBOM
	bash image/build.sh $(ARGS)

docker-image: ## The same image with docker build (IMAGE=...); az acr build uses the same Dockerfile
	docker build --platform linux/amd64 -t $(IMAGE) .

clean: ## Remove the virtualenv and generated files
	rm -rf $(VENV) .run .build dist .pytest_cache .mypy_cache .ruff_cache .import_linter_cache

.PHONY: help venv tools helm manifests localkube localkube-system cluster lint test test-system run dashboard-png certs bench soak fuzz deploy lock image docker-image dist clean
