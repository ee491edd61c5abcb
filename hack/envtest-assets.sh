#!/usr/bin/env bash
# Builds kube-apiserver and etcd from Go modules (no downloads of prebuilt
# binaries) and fetches the pinned backend CRDs (Kubeflow's PyTorchJob and
# MPIJob, JobSet; Kubeflow Trainer v2's with `trainer-crds`) from their Go modules, into a
# cache outside the repo that later runs reuse. Prints the assets folder.
# `kueue` builds the Kueue controller (sigs.k8s.io/kueue/cmd/kueue) and copies its CRDs and webhook manifests beside
# it (tests/devcluster.py starts it for spec.queueName's tests); it is not one of `controllers` (few tests need it).
#
# KUBEBUILDER_ASSETS, when it names a folder holding kube-apiserver and etcd,
# is used as is (controller-runtime's convention).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.33.13}
ETCD_VERSION=${ETCD_VERSION:-v3.5.21}
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.8.1}
MPI_OPERATOR_VERSION=${MPI_OPERATOR_VERSION:-v0.6.0}
JOBSET_VERSION=${JOBSET_VERSION:-v0.8.2}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
# v0.12.3: its Workload API is kueue.x-k8s.io/v1beta1 (what the operator reads), it is built against Kubernetes 1.32
# libraries (the dev cluster serves 1.33) and against the training-operator and mpi-operator APIs of our CRDs.
KUEUE_VERSION=${KUEUE_VERSION:-v0.12.3}
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.4}
# Kubeflow Trainer v2 (the TrainJob backend): its CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime) from its
# Go module (`trainer-crds`).
TRAINER_VERSION=${TRAINER_VERSION:-v2.3.0}
# The JobSet the Trainer is built against (its go.mod): v2.3.0 writes replicatedJobs[].groupName, which the JobSet
# backend's pinned JobSet (JOBSET_VERSION) does not have, so `trainer` brings its own JobSet controller and CRD.
TRAINER_JOBSET_VERSION=${TRAINER_JOBSET_VERSION:-v0.12.0}
# The real node's image registry (CNCF distribution; `registry` subcommand below).
DISTRIBUTION_VERSION=${DISTRIBUTION_VERSION:-v3.1.2}

cache_root=${GPU_ACCEPTANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-acceptance}
assets=${cache_root}/envtest/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}
crds=${cache_root}/backend-crds/training-${TRAINING_OPERATOR_VERSION}-mpi-${MPI_OPERATOR_VERSION}-jobset-${JOBSET_VERSION}
controllers=${cache_root}/dev-controllers/k8s-${K8S_VERSION}-training-${TRAINING_OPERATOR_VERSION}-mpi-${MPI_OPERATOR_VERSION}-jobset-${JOBSET_VERSION}-kwok-${KWOK_VERSION}
# The real node's Go-built parts (make real-node): the kubelet and kube-proxy of the API server's version, the pause
# program its sandboxes run (tests/realnode.py builds the pause image from it) and CoreDNS (the cluster's DNS).
real_node=${cache_root}/real-node/k8s-${K8S_VERSION}
kueue=${cache_root}/dev-controllers/kueue-${KUEUE_VERSION}
trainer_crds=${cache_root}/backend-crds/trainer-${TRAINER_VERSION}
trainer=${cache_root}/dev-controllers/trainer-${TRAINER_VERSION}-jobset-${TRAINER_JOBSET_VERSION}
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[envtest-assets] %s\n' "$*" >&2; }

module_dir() { # module@version -> extracted folder in the module cache
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

# k8s.io/kubernetes/cmd/<name> at K8S_VERSION into <folder>/<name>: kube-apiserver here, kube-controller-manager
# and kube-scheduler for the dev cluster (hack/dev-cluster-assets.sh).
build_k8s_binary() {
  local name=$1 out=$2 work; work=$(mktemp -d)
  log "building ${name} ${K8S_VERSION} (first run only; takes several minutes)"
  (
    cd "$work"
    go mod init "envtest.local/${name}" >/dev/null 2>&1
    # k8s.io/kubernetes replaces its staging modules with ./staging paths; swap
    # each for the published module of the same release (v1.X.Y -> v0.X.Y).
    local gomod staging_version
    gomod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
    staging_version="v0.${K8S_VERSION#v1.}"
    # The module proxy lacks a few staging versions; fall back to the newest
    # published patch of the same minor for those.
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" | awk '{print $1}' | while read -r mod; do
      local version="$staging_version" published
      published=$(go list -m -versions "$mod" 2>/dev/null | tr ' ' '\n' || true)
      if ! grep -qx "$version" <<<"$published"; then
        version=$(grep -E "^${staging_version%.*}\.[0-9]+$" <<<"$published" | sort -V | tail -1 || true)
        [ -n "$version" ] || { log "no published version of $mod for ${staging_version%.*}"; continue; }
      fi
      go mod edit -replace "${mod}=${mod}@${version}"
    done
    go get "k8s.io/kubernetes/cmd/${name}@${K8S_VERSION}" >&2
    # Stamp the version as Kubernetes' own build does (hack/lib/version.sh);
    # without it the server reports v0.0.0-master to clients (kubectl, helm).
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ldflags="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
      ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    done
    go build -trimpath -ldflags "$ldflags" -o "$out/${name}.tmp" "k8s.io/kubernetes/cmd/${name}"
  )
  mv "$out/${name}.tmp" "$out/${name}"
  rm -rf "$work"
}

# Whether <folder>/<name> is there and says it is K8S_VERSION (a binary built before the version stamp
# reports v0.0.0-master: rebuilt).
k8s_binary_current() {
  [ -x "$2/$1" ] && [ "$("$2/$1" --version 2>/dev/null)" = "Kubernetes ${K8S_VERSION}" ]
}

# A one-file Go program (main.go, read from stdin) built in a scratch module into <out>; then the modules it needs.
build_go_main() {
  local out=$1 work; shift
  work=$(mktemp -d)
  (
    cd "$work"
    go mod init "local.build/$(basename "$out")" >/dev/null 2>&1
    cat > main.go
    local module
    for module in "$@"; do go get "$module" >&2; done
    go mod tidy >&2
    go build -trimpath -o "$out.tmp" .
  )
  mv "$out.tmp" "$out"
  rm -rf "$work"
}

build_etcd() {
  log "building etcd ${ETCD_VERSION} (first run only)"
  build_go_main "$assets/etcd" "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
}

# <module>@<version>'s package <pkg> into <folder>/<name>, in a scratch module that requires only it (the
# dependencies are the versions its own go.mod asks for).
build_go_module() {
  local name=$1 module=$2 pkg=$3 out=$4 work; work=$(mktemp -d)
  log "building ${name} from ${module} (first run only; takes a few minutes)"
  (
    cd "$work"
    go mod init "devcluster.local/${name}" >/dev/null 2>&1
    go get "${module}" >&2
    go build -trimpath -o "$out/${name}.tmp" "$pkg"
  )
  mv "$out/${name}.tmp" "$out/${name}"
  rm -rf "$work"
}

# The dev cluster's controllers: the Kubernetes ones of the API server's version, kwok (fake nodes and pod
# phases), and each backend's controller. Arguments: which ones (default: all).
ALL_CONTROLLERS=(kube-scheduler kube-controller-manager kwok jobset-controller mpi-operator training-operator)
build_controller() {
  local c=$controllers
  case "$1" in
    kube-scheduler | kube-controller-manager) k8s_binary_current "$1" "$c" || build_k8s_binary "$1" "$c" ;;
    kwok) [ -x "$c/kwok" ] || build_go_module kwok "sigs.k8s.io/kwok@${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok "$c" ;;
    jobset-controller) [ -x "$c/$1" ] ||
      build_go_module "$1" "sigs.k8s.io/jobset@${JOBSET_VERSION}" sigs.k8s.io/jobset "$c" ;;
    mpi-operator) [ -x "$c/$1" ] || build_go_module "$1" "github.com/kubeflow/mpi-operator@${MPI_OPERATOR_VERSION}" \
      github.com/kubeflow/mpi-operator/cmd/mpi-operator "$c" ;;
    training-operator) [ -x "$c/$1" ] || build_go_module "$1" \
      "github.com/kubeflow/training-operator@${TRAINING_OPERATOR_VERSION}" \
      github.com/kubeflow/training-operator/cmd/training-operator.v1 "$c" ;;
    *) log "unknown controller $1 (one of: ${ALL_CONTROLLERS[*]})"; exit 2 ;;
  esac
}

# The sandbox's pause process: sleeps until SIGINT/SIGTERM and reaps orphans, as Kubernetes' pause.c does; static Go,
# so the pause image is this one file (no C toolchain, no registry).
build_pause() {
  log "building the pause program (first run only)"
  build_go_main "$real_node/pause" <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
GO
}

# The Kueue controller, its CRDs (config/components/crd/bases) and its webhook configurations (the manifests the
# dev cluster rewrites to reach a host process by URL) from the module at KUEUE_VERSION.
build_kueue() {
  mkdir -p "$kueue/crds"
  [ -x "$kueue/kueue" ] || build_go_module kueue "sigs.k8s.io/kueue@${KUEUE_VERSION}" sigs.k8s.io/kueue/cmd/kueue "$kueue"
  local dir; dir=$(module_dir "sigs.k8s.io/kueue@${KUEUE_VERSION}")
  cp "$dir"/config/components/crd/bases/*.yaml "$kueue/crds/"
  cp "$dir/config/components/webhook/manifests.yaml" "$kueue/webhooks.yaml"
  chmod 0644 "$kueue"/crds/*.yaml "$kueue/webhooks.yaml"
}

# CoreDNS with only the plugins the real node's cluster DNS uses (tests/realnode_net.py): the full plugin list
# (cloud DNS providers, etcd, ...) takes several times longer to build. The order of `directives` is the order
# in which a query passes the plugins (CoreDNS's plugin.cfg order).
build_coredns() {
  log "building CoreDNS ${COREDNS_VERSION} (first run only; takes several minutes)"
  build_go_main "$real_node/coredns" "github.com/coredns/coredns@${COREDNS_VERSION}" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
GO
}

fetch_backend_crds() {
  mkdir -p "$crds"
  local to mpi jobset
  to=$(module_dir "github.com/kubeflow/training-operator@${TRAINING_OPERATOR_VERSION}")
  mpi=$(module_dir "github.com/kubeflow/mpi-operator@${MPI_OPERATOR_VERSION}")
  jobset=$(module_dir "sigs.k8s.io/jobset@${JOBSET_VERSION}")
  cp "$to/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$crds/"
  cp "$mpi/manifests/base/kubeflow.org_mpijobs.yaml" "$crds/"
  cp "$jobset/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$crds/"
  chmod 0644 "$crds"/*.yaml
}

# Kubeflow Trainer v2's CRDs (manifests/base/crds) from github.com/kubeflow/trainer/v2 at TRAINER_VERSION: not
# among `crds` (the shared test API server's), so the tests that want a cluster serving TrainJob install them.
fetch_trainer_crds() {
  mkdir -p "$trainer_crds"
  local dir; dir=$(module_dir "github.com/kubeflow/trainer/v2@${TRAINER_VERSION}")
  cp "$dir"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$trainer_crds/"
  chmod 0644 "$trainer_crds"/*.yaml
}

# Kubeflow Trainer v2's controller manager (cmd/trainer-controller-manager) from its Go module at TRAINER_VERSION,
# with its CRDs (crds/) and webhook configurations (webhooks.yaml, the manifests the dev cluster rewrites to reach a
# host process by URL), as `kueue` does; not one of `controllers` (few tests need it).
build_trainer() {
  mkdir -p "$trainer/crds"
  [ -x "$trainer/trainer-controller-manager" ] || build_go_module trainer-controller-manager \
    "github.com/kubeflow/trainer/v2@${TRAINER_VERSION}" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager \
    "$trainer"
  [ -x "$trainer/jobset-controller" ] || build_go_module jobset-controller \
    "sigs.k8s.io/jobset@${TRAINER_JOBSET_VERSION}" sigs.k8s.io/jobset "$trainer"
  local dir jobset; dir=$(module_dir "github.com/kubeflow/trainer/v2@${TRAINER_VERSION}")
  jobset=$(module_dir "sigs.k8s.io/jobset@${TRAINER_JOBSET_VERSION}")
  cp "$dir"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$trainer/crds/"
  cp "$jobset/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$trainer/crds/"
  cp "$dir/manifests/base/webhook/manifests.yaml" "$trainer/webhooks.yaml"
  chmod 0644 "$trainer"/crds/*.yaml "$trainer/webhooks.yaml"
}

# The real node's registry: CNCF distribution's cmd/registry at DISTRIBUTION_VERSION, version-stamped as its Makefile
# does (`registry --version` then names it), in a folder of its own.
registry_dir=${cache_root}/registry/distribution-${DISTRIBUTION_VERSION}
build_registry() {
  local module=github.com/distribution/distribution/v3
  "$registry_dir/registry" --version 2>/dev/null | grep -q " ${DISTRIBUTION_VERSION}\$" && return
  log "building the registry (distribution ${DISTRIBUTION_VERSION}) from its Go module (first run only)"
  mkdir -p "$registry_dir"
  local work; work=$(mktemp -d)
  (
    cd "$work"
    go mod init "devcluster.local/registry" >/dev/null 2>&1
    go get "${module}@${DISTRIBUTION_VERSION}" >&2
    go build -trimpath -ldflags "-s -w -X ${module}/version.version=${DISTRIBUTION_VERSION}" \
      -o "$registry_dir/registry.tmp" "${module}/cmd/registry"
  )
  mv "$registry_dir/registry.tmp" "$registry_dir/registry"
  rm -rf "$work"
}

case "${1:-assets}" in
  assets)
    if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
      echo "$KUBEBUILDER_ASSETS"; exit 0
    fi
    mkdir -p "$assets"
    k8s_binary_current kube-apiserver "$assets" || build_k8s_binary kube-apiserver "$assets"
    [ -x "$assets/etcd" ] || build_etcd
    echo "$assets"
    ;;
  crds)
    [ -f "$crds/kubeflow.org_mpijobs.yaml" ] && [ -f "$crds/kubeflow.org_pytorchjobs.yaml" ] &&
      [ -f "$crds/jobset.x-k8s.io_jobsets.yaml" ] || fetch_backend_crds
    echo "$crds"
    ;;
  trainer-crds)
    [ -f "$trainer_crds/trainer.kubeflow.org_trainjobs.yaml" ] &&
      [ -f "$trainer_crds/trainer.kubeflow.org_trainingruntimes.yaml" ] || fetch_trainer_crds
    echo "$trainer_crds"
    ;;
  trainer)
    [ -x "$trainer/trainer-controller-manager" ] && [ -x "$trainer/jobset-controller" ] &&
      [ -f "$trainer/webhooks.yaml" ] || build_trainer
    echo "$trainer"
    ;;
  controllers)
    mkdir -p "$controllers"
    shift || true
    for name in "${@:-${ALL_CONTROLLERS[@]}}"; do build_controller "$name"; done
    echo "$controllers"
    ;;
  kueue)
    [ -x "$kueue/kueue" ] && [ -f "$kueue/webhooks.yaml" ] || build_kueue
    echo "$kueue"
    ;;
  real-node)
    mkdir -p "$real_node"
    k8s_binary_current kubelet "$real_node" || build_k8s_binary kubelet "$real_node"
    k8s_binary_current kube-proxy "$real_node" || build_k8s_binary kube-proxy "$real_node"
    [ -x "$real_node/pause" ] || build_pause
    [ -x "$real_node/coredns" ] && [ "$(cat "$real_node/coredns.version" 2>/dev/null)" = "$COREDNS_VERSION" ] ||
      { build_coredns && echo "$COREDNS_VERSION" > "$real_node/coredns.version"; }
    echo "$real_node"
    ;;
  registry)
    build_registry
    echo "$registry_dir"
    ;;
  *) echo "usage: $0 [assets|crds|trainer-crds|controllers [NAME...]|kueue|trainer|real-node|registry]" >&2; exit 2 ;;
esac
