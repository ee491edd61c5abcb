#!/usr/bin/env bash
# The operator image's install steps: the gpu-acceptance distribution with its "operator" extra (kopf, the
# Kubernetes client, prometheus-client, cronsim; no torch) into the Python environment of $PYTHON. Dockerfile.operator runs
# exactly this. There is no Docker engine in CI, so `--check` replays the image build instead: it stages the same
# files the Dockerfile copies, installs them with this script into a throwaway venv, and smoke-tests the result.
#
#   hack/install-operator.sh [SRC]    install SRC (default: this repository) into $PYTHON (default python3)
#   hack/install-operator.sh --check  what `make operator-install-check` runs
#
# PIP_INSTALL_ARGS: pip's extra arguments; default --no-cache-dir (the image keeps no pip cache). --check reuses
# the pip cache instead, so that a re-run takes seconds.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The build context Dockerfile.operator COPYs (tests/unit/test_operator_install.py keeps the two in step).
IMAGE_FILES=(pyproject.toml README.md operator workload hack/install-operator.sh)

log() { printf '[install-operator] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

install() {
  local src=$1 python=${PYTHON:-python3}
  [ -f "$src/pyproject.toml" ] || die "$src has no pyproject.toml"
  # shellcheck disable=SC2086  # PIP_INSTALL_ARGS is a list of words
  "$python" -m pip install --disable-pip-version-check ${PIP_INSTALL_ARGS---no-cache-dir} "${src}[operator]"
}

# The installed operator, not the checkout: run from an empty folder with no PYTHONPATH.
smoke() {
  local venv=$1 work=$2
  (
    cd "$work"
    unset PYTHONPATH
    "$venv/bin/gpu-acceptance" --help >/dev/null || die "gpu-acceptance --help failed"
    "$venv/bin/gpu-acceptance" operator --help >/dev/null || die "gpu-acceptance operator --help failed"
    "$venv/bin/gpu-acceptance" crd >"$work/crd.yaml" || die "gpu-acceptance crd failed"
    cmp -s "$work/crd.yaml" "$repo/crds/acceptancetest.yaml" ||
      die "the installed gpu-acceptance crd differs from crds/acceptancetest.yaml"
    "$venv/bin/python" - <<'PY'
import importlib
import importlib.util
import pkgutil
import sys

import cronsim, kopf, kubernetes, prometheus_client, pydantic, yaml  # noqa: E401,F401  the operator extra
import acceptance_operator

if not acceptance_operator.__file__.startswith(sys.prefix):
    sys.exit(f"acceptance_operator came from {acceptance_operator.__file__}, not the venv {sys.prefix}")
# Every operator module imports with the operator extra alone (the CLI's subcommands import lazily, so a missing
# dependency would otherwise only show when the operator starts in the cluster).
modules = [m.name for m in pkgutil.walk_packages(acceptance_operator.__path__, "acceptance_operator.")]
for name in modules:
    importlib.import_module(name)
if importlib.util.find_spec("torch") is not None:
    sys.exit("torch is installed: the operator image must not pull the workload's dependencies")
print(f"imported {len(modules)} operator modules with kubernetes {kubernetes.__version__}: {', '.join(modules)}")
PY
  )
}

# The venv's pip: PYTHON's own package linked into the venv's site-packages (what virtualenv's app-data seeder
# does), which installs into the venv as an installed pip would. `python3 -m venv` with pip (ensurepip) installs
# and compiles pip afresh: 5 s on an idle machine, 20-40 s on a busy 2-core one, of a check that tests the project's
# install, not pip's. Without a pip in PYTHON, ensurepip it is.
link_pip() {
  local python=$1 venv=$2 pip site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if pip=$("$python" -c 'import os, pip; print(os.path.dirname(pip.__file__))' 2>/dev/null); then
    ln -s "$pip" "$site/pip"
  else
    "$venv/bin/python" -m ensurepip --default-pip >/dev/null
  fi
}

check() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/operator-install-check.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src" "$tmp/work"
  log "staging ${IMAGE_FILES[*]} (the image's build context)"
  (cd "$repo" && tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' "${IMAGE_FILES[@]}") |
    tar -x -C "$tmp/src"
  log "creating a venv with $(python3 --version), its pip linked in from there"
  python3 -m venv --without-pip "$tmp/venv"
  link_pip python3 "$tmp/venv"
  log "installing (hack/install-operator.sh ${tmp}/src)"
  PYTHON="$tmp/venv/bin/python" PIP_INSTALL_ARGS=${PIP_INSTALL_ARGS:-} "$tmp/src/hack/install-operator.sh" "$tmp/src" \
    >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log" >&2; die "install failed"; }
  smoke "$tmp/venv" "$tmp/work"
  log "ok: the operator installs from the image's files and runs"
}

case "${1:-$repo}" in
  --check) check ;;
  -h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  -*) die "unknown option $1 (see --help)" ;;
  *) install "$(cd "${1:-$repo}" && pwd)" ;;
esac
