#!/usr/bin/env bash
# Builds kube-apiserver and etcd from Go modules (no downloads of prebuilt
# binaries) and fetches the pinned backend CRDs (Kubeflow's PyTorchJob and
# MPIJob, JobSet) from their Go modules, into a
# cache outside the repo that later runs reuse. Prints the assets folder.
#
# KUBEBUILDER_ASSETS, when it names a folder holding kube-apiserver and etcd,
# is used as is (controller-runtime's convention).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.33.13}
ETCD_VERSION=${ETCD_VERSION:-v3.5.21}
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.8.1}
MPI_OPERATOR_VERSION=${MPI_OPERATOR_VERSION:-v0.6.0}
JOBSET_VERSION=${JOBSET_VERSION:-v0.8.2}

cache_root=${GPU_ACCEPTANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-acceptance}
assets=${cache_root}/envtest/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}
crds=${cache_root}/backend-crds/training-${TRAINING_OPERATOR_VERSION}-mpi-${MPI_OPERATOR_VERSION}-jobset-${JOBSET_VERSION}
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[envtest-assets] %s\n' "$*" >&2; }

module_dir() { # module@version -> extracted folder in the module cache
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

build_kube_apiserver() {
  local work; work=$(mktemp -d)
  log "building kube-apiserver ${K8S_VERSION} (first run only; takes several minutes)"
  (
    cd "$work"
    go mod init envtest.local/kube-apiserver >/dev/null 2>&1
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
    go get "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}" >&2
    # Stamp the version as Kubernetes' own build does (hack/lib/version.sh);
    # without it the server reports v0.0.0-master to clients (kubectl, helm).
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ldflags="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
      ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    done
    go build -trimpath -ldflags "$ldflags" -o "$assets/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  )
  mv "$assets/kube-apiserver.tmp" "$assets/kube-apiserver"
  rm -rf "$work"
}

build_etcd() {
  local work; work=$(mktemp -d)
  log "building etcd ${ETCD_VERSION} (first run only)"
  (
    cd "$work"
    go mod init envtest.local/etcd >/dev/null 2>&1
    cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
    go mod tidy >&2
    go build -trimpath -o "$assets/etcd.tmp" .
  )
  mv "$assets/etcd.tmp" "$assets/etcd"
  rm -rf "$work"
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

case "${1:-assets}" in
  assets)
    if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
      echo "$KUBEBUILDER_ASSETS"; exit 0
    fi
    mkdir -p "$assets"
    # A binary built before the version stamp reports v0.0.0-master: rebuild it.
    if ! { [ -x "$assets/kube-apiserver" ] &&
           [ "$("$assets/kube-apiserver" --version 2>/dev/null)" = "Kubernetes ${K8S_VERSION}" ]; }; then
      build_kube_apiserver
    fi
    [ -x "$assets/etcd" ] || build_etcd
    echo "$assets"
    ;;
  crds)
    [ -f "$crds/kubeflow.org_mpijobs.yaml" ] && [ -f "$crds/kubeflow.org_pytorchjobs.yaml" ] &&
      [ -f "$crds/jobset.x-k8s.io_jobsets.yaml" ] || fetch_backend_crds
    echo "$crds"
    ;;
  *) echo "usage: $0 [assets|crds]" >&2; exit 2 ;;
esac
