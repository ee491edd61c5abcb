#!/usr/bin/env bash
# `make push REGISTRY=host:port` (after `make images`): pushes the operator and workload images `make images` built
# to REGISTRY/gpu-acceptance/{operator,workload}:<version>, and the chart, packaged, as the OCI artifact
# oci://REGISTRY/charts/gpu-acceptance:<chart version>. TLS is verified (never --tls-verify=false).
#
#   REGISTRY            host:port (required)
#   REGISTRY_CA         the CA file that signed the registry's certificate (default: the system's trust store)
#   REGISTRY_AUTH_FILE  a Docker config JSON holding the login (podman's variable; helm reads it too), or
#   REGISTRY_USER, REGISTRY_PASSWORD  a login made here (podman login, helm registry login) into a file of its own
#   IMAGE_REGISTRY, VERSION  the local images' names, as for hack/build-images.sh
#
# Only what the registry lacks is sent: podman checks each layer there first (and remembers the compressed form of
# the layers it pushed before), so an unchanged 6 GB workload image costs a few requests. `make real-node` prints
# the three variables for its own registry (tests/registry.py).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE_REGISTRY=${IMAGE_REGISTRY:-ghcr.io/gpu-acceptance}
chart_dir=$repo/charts/gpu-acceptance
VERSION=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart_dir/Chart.yaml")}
TOOLS_BIN=$(bash "$repo/hack/install-tools.sh" bindir)
HELM=${HELM:-$TOOLS_BIN/helm}

log() { printf '[push] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ -n "${REGISTRY:-}" ] || die "REGISTRY is not set: make push REGISTRY=host:port (make real-node prints its own)"
command -v podman >/dev/null || die "podman is not installed (make tools)"
[ -x "$HELM" ] || die "helm is missing at $HELM (make tools)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tls=()
helm_tls=()
if [ -n "${REGISTRY_CA:-}" ]; then
  [ -f "$REGISTRY_CA" ] || die "REGISTRY_CA=$REGISTRY_CA is not a file"
  # podman reads the CA from a folder of *.crt files.
  mkdir -p "$work/certs" && cp "$REGISTRY_CA" "$work/certs/ca.crt"
  tls=(--cert-dir "$work/certs")
  helm_tls=(--ca-file "$REGISTRY_CA")
fi

# One authfile for podman and helm: the one given, or a login made here.
if [ -n "${REGISTRY_USER:-}" ]; then
  [ -n "${REGISTRY_PASSWORD:-}" ] || die "REGISTRY_USER is set but REGISTRY_PASSWORD is not"
  export REGISTRY_AUTH_FILE=$work/auth.json
  printf '%s' "$REGISTRY_PASSWORD" | podman login "${tls[@]}" --authfile "$REGISTRY_AUTH_FILE" \
    --username "$REGISTRY_USER" --password-stdin "$REGISTRY" >/dev/null
  printf '%s' "$REGISTRY_PASSWORD" | "$HELM" registry login "${helm_tls[@]}" --registry-config "$REGISTRY_AUTH_FILE" \
    --username "$REGISTRY_USER" --password-stdin "$REGISTRY" >/dev/null 2>&1 || die "helm registry login $REGISTRY failed"
elif [ -n "${REGISTRY_AUTH_FILE:-}" ]; then
  [ -f "$REGISTRY_AUTH_FILE" ] || die "REGISTRY_AUTH_FILE=$REGISTRY_AUTH_FILE is not a file"
else
  die "no login for $REGISTRY: set REGISTRY_AUTH_FILE, or REGISTRY_USER and REGISTRY_PASSWORD"
fi

for name in operator workload; do
  src=$IMAGE_REGISTRY/$name:$VERSION dst=$REGISTRY/gpu-acceptance/$name:$VERSION
  podman image exists "$src" || die "$src is not built (make images)"
  started=$SECONDS
  podman push --quiet "${tls[@]}" --authfile "$REGISTRY_AUTH_FILE" "$src" "docker://$dst" ||
    die "podman push $dst failed"
  log "pushed $dst in $((SECONDS - started)) s"
done

started=$SECONDS
chart_version=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart_dir/Chart.yaml")
"$HELM" package "$chart_dir" --destination "$work" >/dev/null
"$HELM" push "${helm_tls[@]}" --registry-config "$REGISTRY_AUTH_FILE" "$work/gpu-acceptance-$chart_version.tgz" \
  "oci://$REGISTRY/charts" >&2 || die "helm push oci://$REGISTRY/charts failed"
log "pushed oci://$REGISTRY/charts/gpu-acceptance:$chart_version in $((SECONDS - started)) s"
