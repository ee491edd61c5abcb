#!/usr/bin/env bash
# Accuracy check against NVIDIA nccl-tests on this machine's GPUs: build nccl-tests from a source tree you
# bring (the GPU machine has no internet), run it and our sweep with the same sizes, print both side by side.
#
#   bench/compare_nccl_tests.sh NCCL_TESTS_SRC [OUT_DIR]
#
# NCCL_TESTS_SRC: a checkout of github.com/NVIDIA/nccl-tests. Needs nvcc (CUDA_HOME, default /usr/local/cuda).
# nccl-tests is built by `hack/install-workload.sh nccl-tests` (as the workload image builds it, incrementally in
# NCCL_TESTS_SRC/build), linked against the NCCL that torch uses (the nvidia-nccl pip package), so both measure
# the same library; that folder is also what `gpu-acceptance local --nccl-tests` takes.
# Environment: GPUS (default: all), MIN_BYTES (8), MAX_BYTES (4G), FACTOR (2), ITERS (20), WARMUP (5),
# COLLECTIVES (all six), RUNS (3: each size is compared at the median of the runs), CUDA_GRAPHS=1 to run
# both with CUDA graphs at every size (nccl-tests -G 1, ours --cuda-graphs always); by default nccl-tests
# launches eagerly and ours as a cluster run does (CUDA graphs below 64 MiB, eager above, median of 3 windows).
# Exit status 1 when any size >= 64 MiB differs by more than 3%, or ours at 1 MiB is under 90% of nccl-tests'.
set -euo pipefail

src=${1:?usage: $0 NCCL_TESTS_SRC [OUT_DIR]}
out=${2:-bench-out}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
gpus=${GPUS:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}
min=${MIN_BYTES:-8} max=${MAX_BYTES:-4G} factor=${FACTOR:-2} iters=${ITERS:-20} warmup=${WARMUP:-5}
collectives=${COLLECTIVES:-all_reduce all_gather reduce_scatter alltoall broadcast sendrecv}
mkdir -p "$out"
log() { printf '[compare] %s\n' "$*" >&2; }
# nccl-tests' K/M/G are binary (1G = 2^30); ours follow Kubernetes (G = 10^9, Gi = 2^30).
binary() { case $1 in *[KMG]) echo "${1}i" ;; *) echo "$1" ;; esac; }

# Built by the image's own step from the source tree you bring (MPI=0, against the NCCL torch loads: the
# nvidia-nccl wheel, or NCCL_HOME), for this machine's GPUs only.
arch=$("$python" -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}{n}")')
log "building nccl-tests in $src (sm_$arch) with hack/install-workload.sh nccl-tests"
PYTHON="$python" NVCC_GENCODE="-gencode=arch=compute_$arch,code=sm_$arch" NCCL_TESTS_BUILDDIR="$src/build" \
  bash "$repo/hack/install-workload.sh" nccl-tests "$src/build" "$src" 2>"$out/nccl-tests-build.log" ||
  { tail -30 "$out/nccl-tests-build.log" >&2; log "build failed"; exit 2; }
nccl_home=$(PYTHON="$python" bash "$repo/hack/install-workload.sh" nccl-home)
export LD_LIBRARY_PATH="$nccl_home/lib:${LD_LIBRARY_PATH:-}"

graphs_flag=() ours_graphs=()
if [ "${CUDA_GRAPHS:-0}" = 1 ]; then graphs_flag=(-G 1); ours_graphs=(--cuda-graphs always); fi
runs=${RUNS:-3}
# Runs interleave (nccl-tests, ours, nccl-tests, ours, ...), so a drift of the machine lands on both.
for run in $(seq 1 "$runs"); do
  mkdir -p "$out/run$run"
  for c in $collectives; do
    log "run $run/$runs: nccl-tests ${c}_perf on $gpus GPUs"
    "$src/build/${c}_perf" -b "$min" -e "$max" -f "$factor" -g "$gpus" -n "$iters" -w "$warmup" -c 1 \
      "${graphs_flag[@]}" >"$out/run$run/${c}_perf.txt"
  done
  log "run $run/$runs: ours (bench/nccl_ddp.py)"
  "$python" "$repo/bench/nccl_ddp.py" --gpus "$gpus" --no-ddp \
    --min-bytes "$(binary "$min")" --max-bytes "$(binary "$max")" \
    --factor "$factor" --iters "$iters" --warmup "$warmup" --collectives "${collectives// /,}" \
    "${ours_graphs[@]}" --out "$out/run$run/ours.json" >"$out/run$run/ours.txt"
done

status=0
for c in $collectives; do
  "$python" "$repo/bench/compare_nccl_tests.py" "$out"/run*/"${c}_perf.txt" "$out"/run*/ours.json --collective "$c" ||
    status=1
  echo
done
exit $status
