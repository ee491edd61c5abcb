# gpu-acceptance developer tasks. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON     ?= python3
PIP        ?= $(PYTHON) -m pip
PYTEST_ARGS ?=
DEV_CLUSTER_DIR ?= .dev-cluster
# Fake GPU nodes (kwok) of `make dev-cluster`, 8 nvidia.com/gpu each; 0: the API server alone.
DEV_NODES ?= 4
# PyTorch's CPU-only wheels (no ~3 GB of CUDA libraries), used when reachable.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TOOLS_BIN := $(shell bash hack/install-tools.sh bindir)

REAL_NODE_DIR ?= .real-node
# `make push`'s registry (host:port); default: the real node's (tests/registry.py), when one runs here.
REAL_NODE_REGISTRY := $(shell cat $(REAL_NODE_DIR)/registry/address 2>/dev/null)
REGISTRY ?= $(REAL_NODE_REGISTRY)

.PHONY: help install tools images images-prune push test lint dev-cluster dev-cluster-restart dev-cluster-down real-node real-node-down bench-operator bench-verdicts crds operator-install-check workload-install-check

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: ## pip-install the project (operator, report + dev extras) and the workload's CPU test needs
	$(PIP) install -e '.[operator,report,dev]'
	$(PIP) install nvidia-ml-py
	@if $(PYTHON) -c 'import urllib.request as u; u.urlopen("$(TORCH_CPU_INDEX)/torch/", timeout=5)' 2>/dev/null; then \
	  echo "$(PIP) install torch --index-url $(TORCH_CPU_INDEX)"; \
	  $(PIP) install torch --index-url $(TORCH_CPU_INDEX); \
	else \
	  echo "$(TORCH_CPU_INDEX) unreachable: $(PIP) install torch (PyPI)"; \
	  $(PIP) install torch; \
	fi

tools: ## helm, promtool, lua5.4, chromium (headless, for the HTML report test), kube-apiserver + etcd, kube-controller-manager, kube-scheduler, kwok, the JobSet controller, training-operator, mpi-operator, Kueue and Kubeflow Trainer v2 (with the JobSet it is built against), the real node's kubelet, kube-proxy, CoreDNS and pause and its registry (CNCF distribution) (built from Go modules), backend CRDs, podman/containerd (apt): cached outside the repo
	bash hack/install-tools.sh
	@bash hack/envtest-assets.sh assets >/dev/null
	@bash hack/envtest-assets.sh crds >/dev/null
	@bash hack/envtest-assets.sh controllers >/dev/null
	@bash hack/envtest-assets.sh kueue >/dev/null
	@bash hack/envtest-assets.sh trainer-crds >/dev/null
	@bash hack/envtest-assets.sh trainer >/dev/null
	@bash hack/envtest-assets.sh real-node >/dev/null
	@bash hack/envtest-assets.sh registry >/dev/null

images: ## build the operator and workload images with podman/buildah (a Debian base where no registry is reachable; NCCL_TESTS_SRC=DIR builds nccl-tests), tagged as the chart expects; unchanged inputs are not rebuilt
	bash hack/build-images.sh all

push: ## push the built images and the chart (an OCI artifact) to REGISTRY=host:port with REGISTRY_CA and REGISTRY_AUTH_FILE (or REGISTRY_USER, REGISTRY_PASSWORD); default: the real node's registry and login, and its containerd then pulls them; only changed layers travel
	@if [ -n "$(REAL_NODE_REGISTRY)" ] && [ "$(REGISTRY)" = "$(REAL_NODE_REGISTRY)" ]; then \
	  export REGISTRY_CA="$${REGISTRY_CA:-$(REAL_NODE_DIR)/registry/ca.crt}"; \
	  if [ -z "$${REGISTRY_USER:-}" ]; then export REGISTRY_AUTH_FILE="$${REGISTRY_AUTH_FILE:-$(REAL_NODE_DIR)/registry/auth.json}"; fi; \
	fi; \
	REGISTRY="$(REGISTRY)" bash hack/push.sh
	@# the real node's containerd pulls the new tags now: its pods pull IfNotPresent and its image store is kept
	@if [ -n "$(REAL_NODE_REGISTRY)" ] && [ "$(REGISTRY)" = "$(REAL_NODE_REGISTRY)" ]; then \
	  python -m tests.realnode pull --dir "$(REAL_NODE_DIR)"; fi

images-prune: ## remove what image builds left behind (dangling layers, build containers)
	bash hack/build-images.sh prune

test: ## run the test suite in two lanes at once (hack/test.sh; cluster tests start their own kube-apiserver + etcd); PYTEST_ARGS="..." runs that selection instead
	assets=$$(bash hack/envtest-assets.sh assets); \
	PATH="$(TOOLS_BIN):$$PATH" KUBEBUILDER_ASSETS="$$assets" PYTHON=$(PYTHON) bash hack/test.sh $(PYTEST_ARGS)

lint: ## ruff
	$(PYTHON) -m ruff check .

dev-cluster: ## kube-apiserver + etcd with the backend CRDs and ours, kube-controller-manager, kube-scheduler, kwok with DEV_NODES fake GPU nodes, the JobSet controller, training-operator, mpi-operator; prints export KUBECONFIG=...
	assets=$$(bash hack/envtest-assets.sh assets); \
	KUBEBUILDER_ASSETS="$$assets" $(PYTHON) -m tests.apiserver up --dir $(DEV_CLUSTER_DIR) --nodes $(DEV_NODES)

dev-cluster-restart: ## restart the dev cluster's API server (an outage of DOWN seconds, default 0); etcd data stays
	$(PYTHON) -m tests.apiserver restart --dir $(DEV_CLUSTER_DIR) --down-seconds $(or $(DOWN),0)

dev-cluster-down: ## stop the dev cluster and remove its folder (etcd data included)
	$(PYTHON) -m tests.apiserver down --wipe --dir $(DEV_CLUSTER_DIR)

real-node: ## the dev cluster's control plane + its registry (htpasswd + TLS) + containerd + a kubelet pulling from it, kube-proxy and CoreDNS (then: make push); writes .real-node/kubeconfig, .real-node/values.yaml and .real-node/registry/; KUEUE=1 starts Kueue too
	assets=$$(bash hack/envtest-assets.sh assets); \
	PATH="$(TOOLS_BIN):$$PATH" KUBEBUILDER_ASSETS="$$assets" $(PYTHON) -m tests.realnode up --dir $(REAL_NODE_DIR) \
	  $(if $(KUEUE),--kueue)

real-node-down: ## stop the real node (pods, kubelet, containerd, registry, control plane) and remove its folder, its containerd image store and its registry's storage
	$(PYTHON) -m tests.realnode down --dir $(REAL_NODE_DIR)

# The benchmark plays the Kubeflow controller itself: its dev cluster is the API server alone.
bench-operator: DEV_NODES = 0
bench-operator: dev-cluster ## the operator at scale on the dev cluster (the API server alone): TESTS=100 RUNS=3, BASE=<other checkout>/operator to compare
	$(PYTHON) bench/operator_scale.py --dev-cluster $(DEV_CLUSTER_DIR) --tests $(or $(TESTS),100) --runs $(or $(RUNS),3) \
		$(if $(BASE),--operator-path $(BASE)) --operator-path operator --out operator-scale-$(or $(TESTS),100).json

bench-verdicts: DEV_NODES = 0
bench-verdicts: dev-cluster ## report -> verdict for 150 reports delivered in pairs 0.1 s apart (160 tests, 10 probes): RUNS=3
	$(PYTHON) bench/operator_scale.py --dev-cluster $(DEV_CLUSTER_DIR) --tests 160 --probes 10 --pairs 0.1 \
		--idle-seconds 5 --runs $(or $(RUNS),3) --operator-path operator --out bench-verdicts.json

crds: ## regenerate crds/acceptancetest.yaml and the chart's copy from the models
	gpu-acceptance crd > crds/acceptancetest.yaml.tmp
	mv crds/acceptancetest.yaml.tmp crds/acceptancetest.yaml
	cp crds/acceptancetest.yaml charts/gpu-acceptance/crds/

operator-install-check: ## install the operator as Dockerfile.operator does (hack/install-operator.sh) into a temp venv; smoke-test it
	bash hack/install-operator.sh --check

workload-install-check: ## install the workload as Dockerfile.workload does (hack/install-workload.sh) into a temp venv; CPU smoke run
	PYTHON=$(PYTHON) bash hack/install-workload.sh --check
