#!/usr/bin/env bash
# `make images`: builds Dockerfile.operator and Dockerfile.workload with podman (or buildah), tagged as the chart
# expects (ghcr.io/gpu-acceptance/{operator,workload}:<the chart's appVersion>), with OCI labels version and revision,
# then runs each image's install check inside it.
#
#   hack/build-images.sh [operator|workload|all]   (default all)
#   hack/build-images.sh prune                      remove what earlier builds left (dangling layers, build cache)
#   hack/build-images.sh runtime-check              a RUN step and a container on the Debian base: the OCI runtime
#
# BASE=public|debian|auto (default auto): the Dockerfiles' public base images (python:3.12-slim, pytorch/pytorch),
#   or bases made here from Debian packages (debootstrap, cached under ~/.cache/gpu-acceptance/images) with Python
#   and PyPI's torch in a venv; auto takes debian when Docker Hub does not answer.
# TORCH (default torch==2.15.0, the CUDA 13.2 build with NCCL 2.30.7 that CI's images carry; docs/checks.md,
#   "Compatibility"): the pip requirement of the Debian base's torch. The public base pins its own by its tag.
# NCCL_TESTS_SRC=DIR: an nccl-tests source tree for the workload's nccl-tests stage (it needs nvcc, so a CUDA devel
#   BUILD_IMAGE). Without one the stage is skipped, and the log, the image's label io.gpu-acceptance.nccl-tests and
#   /opt/nccl-tests/bin/SKIPPED say so (`--check-install --nccl-tests` then fails with that reason).
# AWS_OFI_NCCL_SRC=DIR: an aws-ofi-nccl source tree for the workload's plugin stage (AWS EFA, network.fabric efa; it
#   needs nvcc, so a CUDA devel BUILD_IMAGE, and libfabric: Debian's, or LIBFABRIC_HOME's in the base). Without one
#   the stage is skipped: the label io.gpu-acceptance.aws-ofi-nccl=skip and /opt/aws-ofi-nccl/SKIPPED say so, and
#   `--check-install --efa` fails in the image.
# OCI_RUNTIME: the runtime of RUN steps and install checks (default runc where installed, whatever containers.conf
#   or CONTAINERS_CONF chooses: crun cannot run on hybrid-cgroup hosts).
# IMAGE_REGISTRY (default ghcr.io/gpu-acceptance), VERSION (default appVersion), FORCE=1 (rebuild even when the
#   inputs are unchanged: an image whose label io.gpu-acceptance.inputs matches the hash of its files, base and
#   build arguments is kept, so its revision label names the commit it was built at, whose files were the same).
#
# pip inside the builds uses this machine's pip CA bundle and index settings (mounted for the build only).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${GPU_ACCEPTANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-acceptance}
IMAGE_REGISTRY=${IMAGE_REGISTRY:-ghcr.io/gpu-acceptance}
VERSION=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/gpu-acceptance/Chart.yaml")}
REVISION=${REVISION:-$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)}
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_IMAGE=localhost/gpu-acceptance/debian:${DEBIAN_SUITE}
PYTHON_IMAGE=localhost/gpu-acceptance/python:${DEBIAN_SUITE}
TORCH_IMAGE=localhost/gpu-acceptance/torch:${DEBIAN_SUITE}
TORCH=${TORCH:-torch==2.15.0}
INPUTS_LABEL=io.gpu-acceptance.inputs
# Each image's inputs (the hash that decides a rebuild): its Dockerfile and what it COPYs, hack/install-*.sh's
# IMAGE_FILES; tests/unit/test_images.py keeps them and .dockerignore in step.
OPERATOR_FILES=(Dockerfile.operator pyproject.toml README.md operator workload hack/install-operator.sh)
WORKLOAD_FILES=(Dockerfile.workload pyproject.toml README.md operator workload hack/install-workload.sh)

log() { printf '[build-images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if command -v podman >/dev/null; then ctl=podman
elif command -v buildah >/dev/null; then ctl=buildah
else die "neither podman nor buildah is installed (Debian: apt-get install podman)"; fi

# The OCI runtime of every RUN step and install check, chosen here whatever containers.conf (or CONTAINERS_CONF)
# says: OCI_RUNTIME if set, else runc where it is installed (hack/install-tools.sh installs it; the real node runs
# it too), else the engine's default. crun refuses hosts whose cgroups are hybrid ("cgroups in hybrid mode not
# supported, drop all controllers from cgroupv2"), and a fresh machine may have crun installed and chosen.
oci_runtime() {
  if [ -n "${OCI_RUNTIME:-}" ]; then
    command -v "$OCI_RUNTIME" >/dev/null || die "OCI_RUNTIME=$OCI_RUNTIME is not installed"
    command -v "$OCI_RUNTIME"
  elif command -v runc >/dev/null; then command -v runc
  fi
}
runtime=$(oci_runtime)
runtime_args=()
[ -z "$runtime" ] || runtime_args=(--runtime "$runtime")
if [ "$ctl" = podman ]; then build=(podman "${runtime_args[@]}" build "${runtime_args[@]}")
else build=(buildah bud "${runtime_args[@]}"); fi

# A command in a container of the image. Its rlimits stay within this shell's own (nofile), and nproc within
# CONTAINER_NPROC (default 32768): a container runtime asking for more than the hard limits (podman's defaults
# do, and so does --ulimit host) fails with "operation not permitted" where those are capped, as in the gVisor
# sandboxes CI runs in, which refuse a container more than 32768 processes whatever `ulimit -u` says.
run_image() { # IMAGE COMMAND [ARGS...]
  local image=$1; shift
  local nproc=${CONTAINER_NPROC:-32768}
  [ "$(ulimit -Hu)" = unlimited ] || [ "$(ulimit -Hu)" -ge "$nproc" ] || nproc=$(ulimit -Hu)
  local limits=(--ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc")
  if [ "$ctl" = podman ]; then
    podman "${runtime_args[@]}" run --rm "${limits[@]}" --entrypoint "$1" "$image" "${@:2}"; return
  fi
  local c status=0; c=$(buildah from --pull=never "$image")
  buildah run "${runtime_args[@]}" "$c" -- "$@" || status=$?
  buildah rm "$c" >/dev/null
  return "$status"
}

image_id() { "$ctl" images -q --no-trunc "$1" 2>/dev/null | head -1; }
label_of() { "$ctl" inspect --format "{{ index .Labels \"$2\" }}" "$1" 2>/dev/null || true; }

# sha256 over the files (their paths and contents, as git sees the working tree) and the given words.
inputs_hash() {
  local words=$1; shift
  {
    echo "$words"
    (cd "$repo" && git ls-files -co --exclude-standard -- "$@" | LC_ALL=C sort | while read -r f; do
      [ -f "$f" ] && printf '%s\n' "$f" && sha256sum <"$f"; done)
  } | sha256sum | cut -c1-16
}

# The build's view of this machine's pip settings: its CA bundle and index, mounted read-only (none kept).
build_mounts() {
  local ca=${PIP_CERT:-$(pip3 config get global.cert 2>/dev/null || true)}
  tmp_conf=$(mktemp -d)
  echo "[global]" >"$tmp_conf/pip.conf"
  if [ -n "$ca" ] && [ -f "$ca" ]; then
    cp "$(realpath "$ca")" "$tmp_conf/ca.crt"
    echo "cert = /run/gpu-acceptance-build/ca.crt" >>"$tmp_conf/pip.conf"
  fi
  if [ -n "${PIP_INDEX_URL:-}" ]; then echo "index-url = $PIP_INDEX_URL" >>"$tmp_conf/pip.conf"; fi
  mounts=(-v "$tmp_conf:/run/gpu-acceptance-build:ro" -v "$tmp_conf/pip.conf:/etc/pip.conf:ro")
}

# build TAG HASH [args...]: unless TAG carries HASH already, build it with the label and the pip mounts.
build_if_changed() {
  local tag=$1 hash=$2; shift 2
  if [ -z "${FORCE:-}" ] && [ -n "$(image_id "$tag")" ] && [ "$(label_of "$tag" "$INPUTS_LABEL")" = "$hash" ]; then
    log "$tag is up to date (inputs $hash): not rebuilt (FORCE=1 rebuilds)"
    return
  fi
  local started=$SECONDS
  log "building $tag (inputs $hash)"
  # Bases made here are never pulled (no registry has them); public ones are pulled when missing.
  local pull=()
  if [ "${BASE:-}" != public ]; then pull=(--pull=never); fi
  "${build[@]}" --layers=false "${pull[@]}" -t "$tag" --label "$INPUTS_LABEL=$hash" "${mounts[@]}" "$@"
  log "built $tag in $((SECONDS - started)) s, $(size_of "$tag")"
}

size_of() { "$ctl" images --format '{{.Size}}' "$1" | head -1; }

# A minimal Debian from its packages (debootstrap --variant=minbase), imported as DEBIAN_IMAGE; the tarball is cached.
debian_image() {
  [ -n "$(image_id "$DEBIAN_IMAGE")" ] && return
  local tarball=$cache_root/images/debian-${DEBIAN_SUITE}-minbase.tar.gz
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    [ "$(id -u)" = 0 ] || die "debootstrap needs root"
    local root; root=$(mktemp -d)
    log "debootstrap --variant=minbase $DEBIAN_SUITE from $DEBIAN_MIRROR (first run only)"
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR" >"$root.log" 2>&1 ||
      { tail -20 "$root.log" >&2; rm -rf "$root" "$root.log"; die "debootstrap failed"; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root.log"
    mkdir -p "$(dirname "$tarball")"
    tar -C "$root" --numeric-owner -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  log "importing $tarball as $DEBIAN_IMAGE"
  "$ctl" import --change 'CMD ["/bin/bash"]' "$tarball" "$DEBIAN_IMAGE" >/dev/null
}

debian_bases() {
  debian_image
  local f=hack/images/python-base.Containerfile
  build_if_changed "$PYTHON_IMAGE" "$(inputs_hash "$(image_id "$DEBIAN_IMAGE")" "$f")" \
    -f "$repo/$f" --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" "$repo/hack/images"
  f=hack/images/torch-base.Containerfile
  build_if_changed "$TORCH_IMAGE" "$(inputs_hash "$(image_id "$PYTHON_IMAGE") ${TORCH}" "$f")" \
    -f "$repo/$f" --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --build-arg "TORCH=${TORCH}" "$repo/hack/images"
}

choose_base() {
  if [ "${BASE:-auto}" = auto ]; then
    if curl -s -o /dev/null --max-time 5 https://registry-1.docker.io/v2/; then BASE=public; else
      BASE=debian; log "Docker Hub is unreachable: building on bases made from Debian packages"; fi
  fi
  case "$BASE" in
    public) operator_base=(); workload_base=() ;;
    debian) debian_bases
      operator_base=(--build-arg "BASE_IMAGE=$PYTHON_IMAGE")
      workload_base=(--build-arg "BASE_IMAGE=$TORCH_IMAGE" --build-arg "BUILD_IMAGE=$TORCH_IMAGE") ;;
    *) die "BASE=$BASE: one of public, debian, auto" ;;
  esac
}

common_args() { echo --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION"; }

operator_image() {
  local tag=$IMAGE_REGISTRY/operator:$VERSION base_id=""
  [ ${#operator_base[@]} -eq 0 ] || base_id=$(image_id "$PYTHON_IMAGE")
  # shellcheck disable=SC2046
  build_if_changed "$tag" "$(inputs_hash "$VERSION $BASE $base_id" "${OPERATOR_FILES[@]}")" \
    -f "$repo/Dockerfile.operator" "${operator_base[@]}" $(common_args) "$repo"
  log "install check inside $tag"
  run_image "$tag" gpu-acceptance crd | cmp -s - "$repo/crds/acceptancetest.yaml" ||
    die "gpu-acceptance crd in $tag differs from crds/acceptancetest.yaml"
  run_image "$tag" python -c "$OPERATOR_IMPORTS" || die "the operator's modules do not import in $tag"
}

OPERATOR_IMPORTS='
import importlib, importlib.util, pkgutil, sys
import acceptance_operator
mods = [m.name for m in pkgutil.walk_packages(acceptance_operator.__path__, "acceptance_operator.")]
for m in mods: importlib.import_module(m)
sys.exit("torch in the operator image") if importlib.util.find_spec("torch") else None
print(f"ok: {len(mods)} operator modules import")'

workload_image() {
  local tag=$IMAGE_REGISTRY/workload:$VERSION base_id="" nccl=(--build-arg NCCL_TESTS=skip) src_mount=()
  local efa=(--build-arg AWS_OFI_NCCL=skip)
  [ ${#workload_base[@]} -eq 0 ] || base_id=$(image_id "$TORCH_IMAGE")
  if [ -n "${NCCL_TESTS_SRC:-}" ]; then
    [ -f "$NCCL_TESTS_SRC/src/common.h" ] || die "NCCL_TESTS_SRC=$NCCL_TESTS_SRC is not an nccl-tests source tree"
    nccl=(--build-arg NCCL_TESTS=build --build-arg NCCL_TESTS_SRC=/run/nccl-tests-src)
    src_mount=(-v "$(realpath "$NCCL_TESTS_SRC"):/run/nccl-tests-src:ro")
  else
    log "no nccl-tests source tree (NCCL_TESTS_SRC): skipping the nccl-tests stage; the image's label" \
      "io.gpu-acceptance.nccl-tests=skip says so, and checks.nccl.crossCheck cannot run with it"
  fi
  if [ -n "${AWS_OFI_NCCL_SRC:-}" ]; then
    grep -qs aws-ofi-nccl "$AWS_OFI_NCCL_SRC/configure.ac" ||
      die "AWS_OFI_NCCL_SRC=$AWS_OFI_NCCL_SRC is not an aws-ofi-nccl source tree"
    efa=(--build-arg AWS_OFI_NCCL=build --build-arg AWS_OFI_NCCL_SRC=/run/aws-ofi-nccl-src)
    src_mount+=(-v "$(realpath "$AWS_OFI_NCCL_SRC"):/run/aws-ofi-nccl-src:ro")
  fi
  # shellcheck disable=SC2046
  build_if_changed "$tag" "$(inputs_hash "$VERSION $BASE $base_id ${nccl[*]} ${NCCL_TESTS_SRC:-} ${efa[*]} \
    ${AWS_OFI_NCCL_SRC:-}" "${WORKLOAD_FILES[@]}")" -f "$repo/Dockerfile.workload" "${workload_base[@]}" \
    "${nccl[@]}" "${efa[@]}" "${src_mount[@]}" $(common_args) "$repo"
  log "install check inside $tag"
  run_image "$tag" python -m acceptance_workload --check-install --rdma --mpi || die "$tag is incomplete"
  if [ -z "${NCCL_TESTS_SRC:-}" ]; then
    run_image "$tag" python -m acceptance_workload --check-install --nccl-tests >/dev/null &&
      die "--check-install --nccl-tests passed in $tag, built without nccl-tests"
    log "as expected, --check-install --nccl-tests fails in $tag: $(label_of "$tag" io.gpu-acceptance.nccl-tests)"
  fi
  if [ -n "${AWS_OFI_NCCL_SRC:-}" ]; then
    run_image "$tag" python -m acceptance_workload --check-install --efa || die "$tag lacks the EFA plugin stack"
  else
    run_image "$tag" python -m acceptance_workload --check-install --efa >/dev/null &&
      die "--check-install --efa passed in $tag, built without the aws-ofi-nccl plugin"
    log "as expected, --check-install --efa fails in $tag: $(label_of "$tag" io.gpu-acceptance.aws-ofi-nccl)"
  fi
}

# What a build needs of the OCI runtime, in seconds: a RUN step on the Debian base, then a container of the result.
runtime_check() {
  debian_image
  local dir tag=localhost/gpu-acceptance/runtime-check:latest
  dir=$(mktemp -d)
  printf 'FROM %s\nRUN echo "built with a RUN step" >/built\n' "$DEBIAN_IMAGE" >"$dir/Containerfile"
  "${build[@]}" --pull=never --layers=false -t "$tag" "$dir"
  rm -rf "$dir"
  run_image "$tag" cat /built
  "$ctl" rmi "$tag" >/dev/null
}

# Dangling images (a rebuilt tag's old image, failed builds' layers) and stopped containers; tagged images stay.
prune() {
  "$ctl" image prune -f >/dev/null 2>&1 || true
  if [ "$ctl" = podman ]; then podman container prune -f >/dev/null 2>&1 || true; fi
}

what=${1:-all}
case "$what" in
  prune) prune; exit 0 ;;
  runtime-check) log "OCI runtime: ${runtime:-the default of $ctl}"; runtime_check; exit 0 ;;
  operator | workload | all) ;;
  -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown target $what (see --help)" ;;
esac
trap 'rm -rf "${tmp_conf:-}"' EXIT
log "OCI runtime: ${runtime:-the default of $ctl}"
build_mounts
choose_base
[ "$what" = workload ] || operator_image
[ "$what" = operator ] || workload_image
prune
log "images: $(for t in operator workload; do printf '%s/%s:%s (%s) ' "$IMAGE_REGISTRY" "$t" "$VERSION" \
  "$(size_of "$IMAGE_REGISTRY/$t:$VERSION" 2>/dev/null || echo none)"; done)"
