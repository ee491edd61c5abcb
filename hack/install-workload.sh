#!/usr/bin/env bash
# The workload image's install steps. Dockerfile.workload runs exactly these on a CUDA PyTorch base image:
#
#   hack/install-workload.sh system       OpenMPI and an SSH server for MPIJob (apt; sshd set up the way
#                                         mpi-operator's workers run it) and rdma-core's user-space libraries
#                                         (libibverbs, the providers, librdmacm: NCCL's IB/RoCE transport), as root
#   hack/install-workload.sh python SRC   the gpu-acceptance distribution with its "workload" extra into $PYTHON
#                                         (default python3; torch already in the base image is kept), then
#                                         `python -m acceptance_workload --check-install --rdma` (with --mpi when
#                                         mpirun is installed) so a build with a missing piece fails here
#   hack/install-workload.sh --check      what `make workload-install-check` runs (no Docker engine in CI): stage
#                                         the files the Dockerfile copies, run the python step into a throwaway
#                                         venv that sees this machine's torch (--system-site-packages), with the
#                                         RDMA packages unpacked (apt-get download, dpkg-deb -x: nothing installed
#                                         on this machine) on LD_LIBRARY_PATH, and run the installed
#                                         `gpu-acceptance local --cpu` from an empty folder
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

log() { printf '[install-workload] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

system() {
  [ "$(id -u)" = 0 ] || die "the system step installs packages with apt-get: run it as root"
  command -v apt-get >/dev/null || die "apt-get not found: the base image must be Debian or Ubuntu based"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${APT_PACKAGES[@]}"
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
  local mpi=()
  if command -v mpirun >/dev/null; then mpi=(--mpi); fi
  (cd / && "$python" -m acceptance_workload --check-install --rdma "${mpi[@]}") ||
    die "the installed workload is incomplete"
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

from acceptance_workload.report import Report

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
  "$python" -c 'import torch' 2>/dev/null || die "$python has no torch: the check reuses it as the base image's"
  log "unpacking ${RDMA_PACKAGES[*]} (the image's apt step installs them)"
  (cd "$tmp" && apt-get download "${RDMA_PACKAGES[@]}" "${RDMA_DEPENDENCIES[@]}" >"$tmp/apt.log" 2>&1) ||
    { cat "$tmp/apt.log" >&2; die "apt-get download ${RDMA_PACKAGES[*]} failed"; }
  mkdir -p "$tmp/rdma"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/rdma"; done
  local libdir  # every folder of the unpacked packages that holds a shared library (lib/ and usr/lib/ alike)
  libdir=$(find "$tmp/rdma" -name '*.so.*' -printf '%h\n' | sort -u | paste -sd:)
  [ -n "$libdir" ] || die "no shared libraries in the unpacked packages"
  log "creating a venv with $("$python" --version) and its site-packages (torch stands in for the base image's)"
  "$python" -m venv --system-site-packages "$tmp/venv"
  log "installing (hack/install-workload.sh python ${tmp}/src)"
  PYTHON="$tmp/venv/bin/python" PIP_INSTALL_ARGS=${PIP_INSTALL_ARGS:-} LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    bash "$tmp/src/hack/install-workload.sh" python "$tmp/src" >"$tmp/pip.log" 2>&1 ||
    { cat "$tmp/pip.log" >&2; die "install failed"; }
  grep -E '^(ok|MISSING) ' "$tmp/pip.log" >&2 || true
  smoke "$tmp/venv" "$tmp/work"
  log "ok: the workload installs from the image's files and runs"
}

case "${1:-}" in
  system) system ;;
  python) python_step "$(cd "${2:-$repo}" && pwd)" ;;
  --check) check ;;
  -h | --help | "") sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown step $1 (see --help)" ;;
esac
