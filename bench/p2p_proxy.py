"""One-GPU proxy of checks.p2p's copy machinery (issue 43 where only one-GPU machines are lent): the product's
measure.gpu_pairs with the node's two "GPUs" both device 0 (every copy GPU 0 -> GPU 0, through the same streams,
timing and figures as a real pair), and the cost of a CUDA context, which a node's first rank pays once for each
other GPU of the node. Prints JSON."""
import contextlib
import json
import subprocess
import sys
import time


class Watch:  # the watchdog's step, which the stage brings
    def step(self, label):
        return contextlib.nullcontext()


def context_seconds():
    code = ("import time, torch; t = time.perf_counter(); torch.empty(1, device='cuda:0'); "
            "torch.cuda.synchronize(); print(time.perf_counter() - t)")
    return round(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout), 4)


out = {"context_seconds": [context_seconds() for _ in range(5)]}
import torch  # noqa: E402
from acceptance_workload.checks.p2p import measure  # noqa: E402
from acceptance_workload.checks.p2p.quick import quick  # noqa: E402
from acceptance_workload.checks.p2p.spec import P2pCheck  # noqa: E402

torch.empty(1, device="cuda:0")
for name, check in (("default", P2pCheck()), ("quick", quick(P2pCheck()))):
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        entries = measure.gpu_pairs(check, [0, 0], Watch())
        runs.append((round(time.perf_counter() - t, 4), entries))
    out[name] = {"bytes": check.bytes, "iters": check.iters, "seconds_for_2_ordered_pairs": [r[0] for r in runs],
                 "entries_last": runs[-1][1]}
print(json.dumps(out, indent=1))
