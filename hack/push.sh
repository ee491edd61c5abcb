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
#   HELM                the helm to use (default: the one `make tools` installs, else helm on PATH)
#
# The images go with podman, or with buildah where podman is not installed (hack/build-images.sh builds with either;
# both keep images in the same containers-storage). Only what the registry lacks is sent: podman and buildah check
# each layer there first (and remember the compressed form of the layers they pushed before), so an unchanged 6 GB
# workload image costs a few requests. `make real-node` prints the three variables for its own registry
# (tests/registry.py).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE_REGISTRY=${IMAGE_REGISTRY:-ghcr.io/gpu-acceptance}
chart_dir=$repo/charts/gpu-acceptance
VERSION=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart_dir/Chart.yaml")}

log() { printf '[push] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# helm: $HELM, else the one `make tools` installs, else the one on PATH (Helm 3.8 or later pushes OCI charts).
if [ -z "${HELM:-}" ]; then
  tools_helm=$(bash "$repo/hack/install-tools.sh" bindir 2>/dev/null)/helm
  if [ -x "$tools_helm" ]; then HELM=$tools_helm; else HELM=$(command -v helm || true); fi
fi
[ -n "${REGISTRY:-}" ] || die "REGISTRY is not set: make push REGISTRY=host:port (make real-node prints its own)"
if command -v podman >/dev/null; then ctl=podman
elif command -v buildah >/dev/null; then ctl=buildah
else die "neither podman nor buildah is installed (the one that built the images: make images)"; fi
[ -n "$HELM" ] && [ -x "$HELM" ] || die "helm is not installed: put Helm 3.8+ on PATH, set HELM, or run make tools"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tls=()
helm_tls=()
if [ -n "${REGISTRY_CA:-}" ]; then
  [ -f "$REGISTRY_CA" ] || die "REGISTRY_CA=$REGISTRY_CA is not a file"
  # podman and buildah read the CA from a folder of *.crt files.
  mkdir -p "$work/certs" && cp "$REGISTRY_CA" "$work/certs/ca.crt"
  tls=(--cert-dir "$work/certs")
  helm_tls=(--ca-file "$REGISTRY_CA")
fi

# One authfile for podman (or buildah) and helm: the one given, or a login made here.
if [ -n "${REGISTRY_USER:-}" ]; then
  [ -n "${REGISTRY_PASSWORD:-}" ] || die "REGISTRY_USER is set but REGISTRY_PASSWORD is not"
  export REGISTRY_AUTH_FILE=$work/auth.json
  printf '%s' "$REGISTRY_PASSWORD" | "$ctl" login "${tls[@]}" --authfile "$REGISTRY_AUTH_FILE" \
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
  if [ "$ctl" = podman ]; then podman image exists "$src"; else buildah inspect --type image "$src" >/dev/null 2>&1
  fi || die "$src is not built (make images)"
  started=$SECONDS
  "$ctl" push --quiet "${tls[@]}" --authfile "$REGISTRY_AUTH_FILE" "$src" "docker://$dst" ||
    die "$ctl push $dst failed"
  log "pushed $dst in $((SECONDS - started)) s"
done

started=$SECONDS
chart_version=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart_dir/Chart.yaml")
"$HELM" package "$chart_dir" --destination "$work" >/dev/null
"$HELM" push "${helm_tls[@]}" --registry-config "$REGISTRY_AUTH_FILE" "$work/gpu-acceptance-$chart_version.tgz" \
  "oci://$REGISTRY/charts" >&2 || die "helm push oci://$REGISTRY/charts failed"
log "pushed oci://$REGISTRY/charts/gpu-acceptance:$chart_version in $((SECONDS - started)) s"
