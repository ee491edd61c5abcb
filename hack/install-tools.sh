#!/usr/bin/env bash
# Installs the non-Python tools the test suite needs, cached outside the repo:
#   helm   built from its Go module (go install helm.sh/helm/v3/cmd/helm@<pin>)
#          into ${GPU_ACCEPTANCE_CACHE:-~/.cache/gpu-acceptance}/bin
#   promtool built from Prometheus' Go module (cmd/promtool, without the service discovery plugins
#          promtool's rule tests never use), into the same folder: `promtool test rules` checks the chart's alerts
#   lua5.4 the Debian package (Argo CD health checks are Lua), only if missing
#   chromium the Debian package (the HTML report is opened in headless Chromium in a test), only if missing
#   podman, buildah, debootstrap (make images) and containerd, runc, the CNI plugins, iptables (make real-node):
#          Debian packages, only if missing
# and checks that kubectl is on PATH. Silent when everything is already there.
#
#   hack/install-tools.sh             install what is missing
#   hack/install-tools.sh containers  only the image builder and the real node's runtime (apt), so that `make images`
#                                     can start while the Go-built tools build (.ci/run does)
#   hack/install-tools.sh bindir      print the folder to put on PATH (helm, promtool)
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.21.4}
# Prometheus v3.16.0: its Go module is versioned v0.<major*100+minor>.<patch>.
PROMETHEUS_MODULE_VERSION=${PROMETHEUS_MODULE_VERSION:-v0.316.0}

cache_root=${GPU_ACCEPTANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-acceptance}
bin=${cache_root}/bin

log() { printf '[install-tools] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else die "need root (or sudo) to run: $*"
  fi
}

install_helm() {
  if [ -x "$bin/helm" ] && [ "$("$bin/helm" version --template '{{.Version}}' 2>/dev/null)" = "$HELM_VERSION" ]; then
    return
  fi
  command -v go >/dev/null 2>&1 || die "go is not on PATH (needed to build helm ${HELM_VERSION})"
  log "building helm ${HELM_VERSION} from its Go module into ${bin} (first run only; takes a few minutes)"
  mkdir -p "$bin"
  # Stamp version and Kubernetes capabilities as helm's own Makefile does; the
  # Kubernetes minor comes from the client-go that release builds against.
  local gomod k8s_minor ldflags
  gomod=$(env -u GOFLAGS go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  k8s_minor=$(awk '$1 == "k8s.io/client-go" {split($2, v, "."); print v[2]; exit}' "$gomod")
  [ -n "$k8s_minor" ] || die "no k8s.io/client-go in $gomod"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
  done
  GOBIN="$bin" CGO_ENABLED=0 env -u GOFLAGS \
    go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
  [ "$("$bin/helm" version --template '{{.Version}}')" = "$HELM_VERSION" ] || die "built helm does not report ${HELM_VERSION}"
}

install_promtool() {
  local want
  want=$(echo "${PROMETHEUS_MODULE_VERSION#v0.}" | awk -F. '{printf "%d.%d.%s", $1 / 100, $1 % 100, $2}')
  if [ -x "$bin/promtool" ] && "$bin/promtool" --version 2>/dev/null | grep -q "version ${want} "; then
    return
  fi
  command -v go >/dev/null 2>&1 || die "go is not on PATH (needed to build promtool ${want})"
  log "building promtool ${want} from its Go module into ${bin} (first run only; takes several minutes)"
  mkdir -p "$bin"
  # remove_all_sd: no service discovery plugins (cloud SDKs), which rule tests never use: a much smaller build.
  GOBIN="$bin" CGO_ENABLED=0 env -u GOFLAGS go install -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${want}" \
    "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_MODULE_VERSION}"
  "$bin/promtool" --version 2>/dev/null | grep -q "version ${want} " || die "built promtool does not report ${want}"
}

# apt_install COMMAND PACKAGE: install the Debian package when COMMAND is not on PATH.
apt_install() {
  local cmd=$1 pkg=$2
  command -v "$cmd" >/dev/null 2>&1 && return
  command -v apt-get >/dev/null 2>&1 || die "$cmd is missing and apt-get is not available; install $pkg by hand"
  log "installing $pkg (apt-get)"
  local out; out=$(mktemp)
  if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "$pkg"; } >"$out" 2>&1; then
    cat "$out" >&2; rm -f "$out"; die "apt-get install $pkg failed"
  fi
  rm -f "$out"
  command -v "$cmd" >/dev/null 2>&1 || die "$cmd still missing after apt-get install $pkg"
}

install_lua() { apt_install lua5.4 lua5.4; }
install_chromium() { apt_install chromium chromium; }
# The image builder and the real node's runtime (runc: crun fails on a hybrid cgroup host).
install_containers() {
  apt_install podman podman
  apt_install buildah buildah
  apt_install debootstrap debootstrap
  apt_install containerd containerd
  apt_install runc runc
  apt_install iptables iptables
  apt_install ip iproute2  # the real node's registry listens on the default route's address (tests/registry.py)
  [ -x /usr/lib/cni/bridge ] || { apt_install /usr/lib/cni/bridge containernetworking-plugins; }
}

check_kubectl() {
  command -v "${KUBECTL:-kubectl}" >/dev/null 2>&1 ||
    die "kubectl is not on PATH; the cluster tests drive the API server with it (install kubectl >= 1.32)"
}

case "${1:-install}" in
  install) install_helm; install_promtool; install_lua; install_chromium; install_containers; check_kubectl ;;
  containers) install_containers ;;
  bindir) echo "$bin" ;;
  *) echo "usage: $0 [install|containers|bindir]" >&2; exit 2 ;;
esac
