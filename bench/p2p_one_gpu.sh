#!/usr/bin/env bash
# checks.p2p (issue 43) on a one-GPU machine, from the repository root, in one device call (under 2 minutes):
#   1. bench/p2p_proxy.py: the check's copy machinery (measure.gpu_pairs) on a same-device pair, default and --quick
#      sizes, five times each, and the cost of a CUDA context (what a node's first rank pays for each other GPU):
#      the figures issue 43's --quick estimate for 8 GPUs rests on;
#   2. `local --quick` three times: one GPU has no pair, so p2p is a skip that says why, and the run passes.
# Writes $OUT/proxy.json, $OUT/quick<i>.{json,html,out,err} and $OUT/summary.txt. Wheels the machine lacks (pydantic
# and its needs, cronsim) are expected under /tmp/site (/work/.library/device/README.md). Nothing here changes clocks
# or power settings. The pair figures of a node of 2+ GPUs (10 healthy runs, a copy hog, a peer-copy hog, against
# nvbandwidth) need a machine of 2+ GPUs: this script does not stand in for them.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD/operator:$PWD/workload
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' >> $OUT/gpu.txt 2>&1
python3 bench/p2p_proxy.py > $OUT/proxy.json 2> $OUT/proxy.err
for i in 1 2 3; do
  t0=$(date +%s.%N)
  python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' local -f bench/onegpu.yaml \
    --quick --json $OUT/quick$i.json --html $OUT/quick$i.html > $OUT/quick$i.out 2> $OUT/quick$i.err
  code=$?
  echo "quick $i: exit $code in $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s" >> $OUT/summary.txt
done
cat $OUT/summary.txt
