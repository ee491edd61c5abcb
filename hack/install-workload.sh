#!/usr/bin/env bash
# The workload image's install steps. Dockerfile.workload runs exactly these on a CUDA PyTorch base image:
#
#   hack/install-workload.sh system       OpenMPI and an SSH server for MPIJob (apt; sshd set up the way
#                                         mpi-operator's workers run it) and rdma-core's user-space libraries
#                                         (libibverbs, the providers, librdmacm: NCCL's IB/RoCE transport), as root
#   hack/install-workload.sh python SRC   the gpu-acceptance distribution with its "workload" extra into $PYTHON
#                                         (default python3; torch already in the base image is kept), then
#                                         `python -m acceptance_workload --check-install --rdma` (with --mpi when
#                                         mpirun is installed, --nccl-tests when GPU_ACCEPTANCE_NCCL_TESTS_DIR is
#                                         set, as in the image, unless its SKIPPED file says the image was built
#                                         without them) so a build with a missing piece fails here
#   hack/install-workload.sh nccl-tests OUT [SRC]
#                                         NVIDIA nccl-tests (checks.nccl.crossCheck) at the pinned tag, single
#                                         process (MPI=0), built with nvcc against the NCCL torch loads (NCCL_HOME
#                                         overrides); its six <collective>_perf binaries into OUT. SRC (or
#                                         NCCL_TESTS_SRC): a source tree to build instead of cloning the tag.
#                                         NVCC_GENCODE: the GPU architectures (default: nccl-tests' list for the
#                                         CUDA version); NCCL_TESTS_BUILDDIR: keep the objects there (default: a
#                                         temp folder). Dockerfile.workload runs it in its CUDA devel stage.
#   hack/install-workload.sh aws-ofi-nccl OUT SRC
#                                         the aws-ofi-nccl plugin (NCCL's network over AWS EFA) from the source tree
#                                         SRC (or AWS_OFI_NCCL_SRC; nothing is cloned), against libfabric (Debian's
#                                         libfabric-dev, or the EFA installer's at LIBFABRIC_HOME) and the CUDA of
#                                         nvcc, into OUT (OUT/lib/libnccl-net*.so). Dockerfile.workload runs it in its
#                                         CUDA devel stage; the system step then installs libfabric's runtime
#                                         (AWS_OFI_NCCL=build) and the python step checks --efa
#   hack/install-workload.sh nccl-home    prints that NCCL's folder (include/, lib/libnccl.so.2)
#   hack/install-workload.sh --check      what `make workload-install-check` runs (no Docker engine in CI): stage
#                                         the files the Dockerfile copies, run the python step into a throwaway
#                                         venv that sees this machine's torch (--system-site-packages), with the
#                                         RDMA packages unpacked (apt-get download, dpkg-deb -x: nothing installed
#                                         on this machine) on LD_LIBRARY_PATH, and run the installed
#                                         `gpu-acceptance local --cpu` from an empty folder; with nvcc on the
#                                         machine also the nccl-tests step (into a temp folder), whose binaries the
#                                         install check then requires; without nvcc it says it skips them
#
# PIP_INSTALL_ARGS: pip's extra arguments; default --no-cache-dir (the image keeps no pip cache). --check reuses
# the pip cache instead (the build backend, setuptools, comes from it), so that a re-run takes seconds.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The build context Dockerfile.workload COPYs (tests/workload/test_workload_install.py keeps the two in step).
IMAGE_FILES=(pyproject.toml README.md operator workload hack/install-workload.sh)
RDMA_PACKAGES=(libibverbs1 ibverbs-providers librdmacm1)
# What apt-get install pulls in for them on Debian/Ubuntu; --check unpacks these too (it installs nothing).
RDMA_DEPENDENCIES=(libnl-3-200 libnl-route-3-200)
APT_PACKAGES=(openmpi-bin openssh-server openssh-client "${RDMA_PACKAGES[@]}")
# libfabric for the aws-ofi-nccl plugin (image built with AWS_OFI_NCCL=build): the library and fi_info.
EFA_PACKAGES=(libfabric1 libfabric-bin)
EFA_BUILD_PACKAGES=(libfabric-dev libhwloc-dev autoconf automake libtool make)
# nccl-tests for the cross-check: a release pinned by tag and commit (a moved tag fails the build).
NCCL_TESTS_REPO=https://github.com/NVIDIA/nccl-tests
NCCL_TESTS_TAG=v2.19.6
NCCL_TESTS_COMMIT=a0b82b2260cf5152b9f8c061bbf7eaf0ba096432
NCCL_TESTS_BINARIES=(all_reduce_perf all_gather_perf reduce_scatter_perf alltoall_perf broadcast_perf sendrecv_perf)

log() { printf '[install-workload] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

system() {
  [ "$(id -u)" = 0 ] || die "the system step installs packages with apt-get: run it as root"
  command -v apt-get >/dev/null || die "apt-get not found: the base image must be Debian or Ubuntu based"
  export DEBIAN_FRONTEND=noninteractive
  local packages=("${APT_PACKAGES[@]}")
  if [ "${AWS_OFI_NCCL:-skip}" = build ] && [ -z "${LIBFABRIC_HOME:-}" ]; then packages+=("${EFA_PACKAGES[@]}"); fi
  apt-get update
  apt-get install -y --no-install-recommends "${packages[@]}"
  rm -rf /var/lib/apt/lists/*
  # mpi-operator mounts the job's SSH key pair and runs `sshd -De` on the workers; mpirun on the launcher
  # connects to them by their (new every run) DNS names, so host keys are not pinned.
  mkdir -p /run/sshd
  ssh-keygen -A
  sed -i 's/^#\?\s*StrictModes .*/StrictModes no/' /etc/ssh/sshd_config
  grep -q '^StrictModes no' /etc/ssh/sshd_config || echo 'StrictModes no' >>/etc/ssh/sshd_config
  printf 'Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    LogLevel ERROR\n' \
    >/etc/ssh/ssh_config.d/gpu-acceptance.conf
}

python_step() {
  local src=$1 python=${PYTHON:-python3}
  [ -f "$src/pyproject.toml" ] || die "$src has no pyproject.toml"
  # shellcheck disable=SC2086  # PIP_INSTALL_ARGS is a list of words
  "$python" -m pip install --disable-pip-version-check ${PIP_INSTALL_ARGS---no-cache-dir} "${src}[workload]"
  local mpi=() nccl=() efa=()
  if command -v mpirun >/dev/null; then mpi=(--mpi); fi
  # An image built with the aws-ofi-nccl plugin (no SKIPPED file in its folder) must have it, and libfabric's efa.
  if [ -n "${GPU_ACCEPTANCE_AWS_OFI_NCCL_DIR:-}" ] && [ ! -f "$GPU_ACCEPTANCE_AWS_OFI_NCCL_DIR/SKIPPED" ]; then
    efa=(--efa)
  fi
  if [ -n "${GPU_ACCEPTANCE_NCCL_TESTS_DIR:-}" ]; then nccl=(--nccl-tests); fi
  # An image built without nccl-tests (Dockerfile.workload's nccl-tests-skip stage) says why in this file.
  if [ -f "${GPU_ACCEPTANCE_NCCL_TESTS_DIR:-/nonexistent}/SKIPPED" ]; then
    log "nccl-tests not installed: $(cat "$GPU_ACCEPTANCE_NCCL_TESTS_DIR/SKIPPED")"
    nccl=()
  fi
  (cd / && "$python" -m acceptance_workload --check-install --rdma "${mpi[@]}" "${nccl[@]}" "${efa[@]}") ||
    die "the installed workload is incomplete"
}

find_nvcc() {
  command -v nvcc && return
  local candidate=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
  [ -x "$candidate" ] && echo "$candidate"
}

# The NCCL torch loads: the nvidia-nccl wheel's folder (include/nccl.h, lib/libnccl.so.2), else $NCCL_HOME, else the
# system's (a CUDA devel image's libnccl-dev: /usr/include/nccl.h and the libnccl.so.2 ld.so knows), linked into
# one folder of that shape under $1 when given.
nccl_home() {
  local python=${PYTHON:-python3} home=${NCCL_HOME:-} lib
  if [ -z "$home" ]; then
    home=$("$python" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else "")' 2>/dev/null) || home=""
  fi
  if [ -z "$home" ] && [ -f /usr/include/nccl.h ]; then
    lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
    if [ -n "$lib" ] && [ -n "${1:-}" ]; then
      mkdir -p "$1/system-nccl/lib"
      ln -sf /usr/include "$1/system-nccl/include"
      ln -sf "$lib" "$1/system-nccl/lib/libnccl.so.2"
      home=$1/system-nccl
    elif [ -n "$lib" ]; then
      home=$(dirname "$(dirname "$lib")")  # for printing only
    fi
  fi
  [ -n "$home" ] || die "no NCCL found: no nvidia-nccl package in $python (torch's NCCL), no NCCL_HOME, no /usr/include/nccl.h"
  [ -f "$home/include/nccl.h" ] || [ -z "${1:-}" ] || die "no nccl.h under $home/include: set NCCL_HOME"
  echo "$home"
}

nccl_tests() {
  local out=${1:?usage: install-workload.sh nccl-tests OUT [SRC]} src=${2:-${NCCL_TESTS_SRC:-}} nvcc home work
  nvcc=$(find_nvcc) || die "nvcc not found (PATH, CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}): nccl-tests needs a CUDA devel image"
  work=$(mktemp -d "${TMPDIR:-/tmp}/nccl-tests.XXXXXX")
  home=$(nccl_home "$work")
  if [ -z "$src" ]; then
    if ! command -v git >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git ca-certificates
    fi
    command -v git >/dev/null || die "git not found: install it, or pass an nccl-tests source tree (SRC)"
    log "cloning nccl-tests $NCCL_TESTS_TAG"
    git clone --quiet --depth 1 --branch "$NCCL_TESTS_TAG" "$NCCL_TESTS_REPO" "$work/src"
    [ "$(git -C "$work/src" rev-parse HEAD)" = "$NCCL_TESTS_COMMIT" ] ||
      die "nccl-tests $NCCL_TESTS_TAG is no longer commit $NCCL_TESTS_COMMIT: check the release, then update the pin"
    src=$work/src
  fi
  [ -f "$src/src/common.h" ] || die "$src is not an nccl-tests source tree (no src/common.h)"
  # nccl-tests links -L$(NCCL_HOME)/lib -lnccl: the wheel has only libnccl.so.2, so give it the unversioned name.
  mkdir -p "$work/nccl/lib"
  ln -s "$home/include" "$work/nccl/include"
  ln -s "$home/lib/libnccl.so.2" "$work/nccl/lib/libnccl.so"
  ln -s "$home/lib/libnccl.so.2" "$work/nccl/lib/libnccl.so.2"
  local gencode=()
  if [ -n "${NVCC_GENCODE:-}" ]; then gencode=("NVCC_GENCODE=$NVCC_GENCODE"); fi
  log "building nccl-tests $(sed -n 's/^#define NCCL_TESTS_VERSION "\(.*\)"/\1/p' "$src/src/common.h") with $nvcc against $home"
  local build=${NCCL_TESTS_BUILDDIR:-$work/build}  # a kept one makes a rebuild incremental
  make -C "$src" -j"$(nproc)" MPI=0 CUDA_HOME="$(dirname "$(dirname "$nvcc")")" NCCL_HOME="$work/nccl" \
    BUILDDIR="$build" "${gencode[@]}" >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; die "nccl-tests build failed"; }
  mkdir -p "$out"
  for b in "${NCCL_TESTS_BINARIES[@]}"; do
    [ -f "$build/$b" ] || die "the build made no $build/$b"
    if [ "$(realpath "$build/$b")" = "$(realpath -m "$out/$b")" ]; then chmod 0755 "$out/$b"
    else install -m 0755 "$build/$b" "$out/$b"; fi
  done
  rm -rf "$work"
  log "nccl-tests: ${NCCL_TESTS_BINARIES[*]} in $out"
}

aws_ofi_nccl() {
  local out=${1:?usage: install-workload.sh aws-ofi-nccl OUT SRC} src=${2:-${AWS_OFI_NCCL_SRC:-}} nvcc work
  [ -n "$src" ] || die "aws-ofi-nccl needs a source tree (SRC or AWS_OFI_NCCL_SRC): this step clones nothing"
  grep -qs 'aws-ofi-nccl' "$src/configure.ac" || die "$src is not an aws-ofi-nccl source tree (no configure.ac naming it)"
  nvcc=$(find_nvcc) || die "nvcc not found (PATH, CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}): the plugin needs a CUDA devel image"
  local libfabric=${LIBFABRIC_HOME:-/usr}
  if [ -z "${LIBFABRIC_HOME:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${EFA_BUILD_PACKAGES[@]}"
  fi
  [ -f "$libfabric/include/rdma/fabric.h" ] || die "no libfabric headers under $libfabric/include: set LIBFABRIC_HOME"
  work=$(mktemp -d "${TMPDIR:-/tmp}/aws-ofi-nccl.XXXXXX")
  cp -a "$src/." "$work/src"  # the source tree is mounted read-only
  log "building aws-ofi-nccl from $src against $libfabric and $(dirname "$(dirname "$nvcc")")"
  (cd "$work/src" && { [ -x configure ] || ./autogen.sh; } &&
    ./configure --prefix="$out" --with-libfabric="$libfabric" --with-cuda="$(dirname "$(dirname "$nvcc")")" \
      --enable-platform-aws --disable-tests && make -j"$(nproc)" && make install) >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; die "aws-ofi-nccl build failed"; }
  compgen -G "$out/lib/libnccl-net*.so" >/dev/null || die "the build installed no $out/lib/libnccl-net*.so"
  rm -rf "$work"
  log "aws-ofi-nccl: $(cd "$out/lib" && ls libnccl-net*.so | paste -sd' ') in $out/lib"
}

# The installed workload, not the checkout: run from an empty folder with no PYTHONPATH.
smoke() {
  local venv=$1 work=$2
  (
    cd "$work"
    unset PYTHONPATH
    "$venv/bin/python" - <<'PY'
import sys

import acceptance_workload

if not acceptance_workload.__file__.startswith(sys.prefix):
    sys.exit(f"acceptance_workload came from {acceptance_workload.__file__}, not the venv {sys.prefix}")
PY
    "$venv/bin/gpu-acceptance" local --cpu --json "$work/report.json" >"$work/local.out" 2>&1 ||
      { cat "$work/local.out" >&2; die "gpu-acceptance local --cpu failed in the venv"; }
    "$venv/bin/python" - "$work/report.json" <<'PY'
import json
import sys

from acceptance_workload.checks.report_model import Report

report = Report.model_validate(json.load(open(sys.argv[1])))
assert report.mode == "cpu-smoke" and report.passed, report.error
print(f"cpu smoke run from the venv: {len(report.results)} results, passed")
PY
  )
}

check() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/workload-install-check.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src" "$tmp/work"
  log "staging ${IMAGE_FILES[*]} (the image's build context)"
  (cd "$repo" && tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' "${IMAGE_FILES[@]}") |
    tar -x -C "$tmp/src"
  local python=${PYTHON:-python3}
  # find_spec, not an import (6 s on a busy machine): the install check below imports it
  "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null ||
    die "$python has no torch: the check reuses it as the base image's"
  log "unpacking ${RDMA_PACKAGES[*]} (the image's apt step installs them)"
  (cd "$tmp" && apt-get download "${RDMA_PACKAGES[@]}" "${RDMA_DEPENDENCIES[@]}" >"$tmp/apt.log" 2>&1) ||
    { cat "$tmp/apt.log" >&2; die "apt-get download ${RDMA_PACKAGES[*]} failed"; }
  mkdir -p "$tmp/rdma"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/rdma"; done
  local libdir  # every folder of the unpacked packages that holds a shared library (lib/ and usr/lib/ alike)
  libdir=$(find "$tmp/rdma" -name '*.so.*' -printf '%h\n' | sort -u | paste -sd:)
  [ -n "$libdir" ] || die "no shared libraries in the unpacked packages"
  local nccl_tests=""
  if find_nvcc >/dev/null; then
    log "building nccl-tests (hack/install-workload.sh nccl-tests; the image's build stage does the same)"
    PYTHON="$python" nccl_tests "$tmp/nccl-tests/bin"
    nccl_tests="$tmp/nccl-tests/bin"
  else
    log "nvcc not found: skipping the nccl-tests build (the image builds it in its CUDA devel stage); the install" \
      "check below runs without --nccl-tests"
  fi
  log "creating a venv with $("$python" --version) and its site-packages (torch stands in for the base image's)"
  # Without a pip of its own: the venv runs the pip it sees in those site-packages, which installs into the venv
  # (ensurepip's install of a fresh pip took 20-40 s of this check on a busy 2-core machine).
  if "$python" -c 'import pip' 2>/dev/null; then
    "$python" -m venv --system-site-packages --without-pip "$tmp/venv"
  else
    "$python" -m venv --system-site-packages "$tmp/venv"
  fi
  log "installing (hack/install-workload.sh python ${tmp}/src)"
  PYTHON="$tmp/venv/bin/python" PIP_INSTALL_ARGS=${PIP_INSTALL_ARGS:-} LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    GPU_ACCEPTANCE_NCCL_TESTS_DIR="$nccl_tests" bash "$tmp/src/hack/install-workload.sh" python "$tmp/src" \
    >"$tmp/pip.log" 2>&1 ||
    { cat "$tmp/pip.log" >&2; die "install failed"; }
  grep -E '^(ok|MISSING) ' "$tmp/pip.log" >&2 || true
  smoke "$tmp/venv" "$tmp/work"
  log "ok: the workload installs from the image's files and runs"
}

case "${1:-}" in
  system) system ;;
  python) python_step "$(cd "${2:-$repo}" && pwd)" ;;
  nccl-tests) nccl_tests "${2:-}" "${3:-}" ;;
  aws-ofi-nccl) aws_ofi_nccl "${2:-}" "${3:-}" ;;
  nccl-home) nccl_home ;;
  --check) check ;;
  -h | --help | "") sed -n '2,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown step $1 (see --help)" ;;
esac
