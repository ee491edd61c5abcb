"""The bisection of the localisation stage over real gloo groups, with a node slowed from outside.

Bisection runs on more than localize.BISECT_ABOVE nodes, after a job-wide
failure that no pair shows. Here: 17 ranks, one a node (the smallest job that
bisects), running the real stage as the runner starts it after a job-wide
failure (tests/workload/workers.py: a CPU run has no absolute floor, so it can
never fail its job-wide sweep itself). Once the pairs have passed, this test
stops and continues one node's process from outside (SIGSTOP/SIGCONT, stopped
3/4 of the time): a fault only the larger groups see. The stage halves the job
round by round, each half against its sibling, and ends at the smallest block
that is still slow, which holds the slowed node.

17 processes share this host's cores, so in a half of 8 each already runs about
a quarter of the time: the slowed node is stopped 9/10 of the time (not 3/4 as
in test_localize_faults.py) and the halves are judged at 0.5 of their sibling
(workers.py), so that the stall stands out of the scheduler's own sharing.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from acceptance_workload.checks.nccl import localize
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import LocalizationDetail

from tests.workload.multiproc import free_port, rank_env, start
from tests.workload.test_localize_faults import StopLoop

NODES = [f"n-{i:02d}" for i in range(localize.BISECT_ABOVE + 1)]
# 17 -> 8 | 9, the 8 -> 4 | 4, the 4 -> 2 | 2: halves of one size at the end (on shared cores a block of 3
# is slower than one of 2 by itself), and the node in the later-measured half of each round but the first
VICTIM = 6
STOPPED, RUNNING = 0.09, 0.01
FINAL_BLOCK = ["n-06", "n-07"]


def test_a_fault_only_larger_groups_see_is_bisected_down_to_the_slowed_nodes_block(tmp_path: Path) -> None:
    assert len(NODES) > localize.BISECT_ABOVE
    port = free_port()
    envs = [rank_env(r, len(NODES), port, node, 0, 1) for r, node in enumerate(NODES)]
    procs = start([[sys.executable, "-m", "tests.workload.workers", "localize-after-job-failure", str(tmp_path)]]
                  * len(NODES), envs)
    logs: list[list[str]] = [[] for _ in procs]
    loops: list[StopLoop] = []

    def read(rank: int) -> None:
        for line in procs[rank].stderr:
            logs[rank].append(line)
            if rank == 0 and "localize round 2:" in line and not loops:  # the pairs are done: bisection next
                loops.append(StopLoop(procs[VICTIM].pid, STOPPED, RUNNING).start())

    readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(len(procs))]
    for t in readers:
        t.start()
    try:
        code = procs[0].wait(timeout=600)
    finally:
        for loop in loops:
            loop.end()
        for p in procs:
            try:
                p.wait(timeout=30)
            except Exception:
                p.kill()
                p.wait()
        for t in readers:
            t.join(timeout=10)
    stderr = "".join(logs[0])
    assert loops, stderr[-3000:]
    assert code == 0, stderr[-3000:]
    out = json.loads((tmp_path / "rank0.json").read_text())
    detail = LocalizationDetail.model_validate(out["detail"])
    results = [CheckResult.model_validate(r) for r in out["results"]]

    pairs = [p for p in detail.pairs if p.kind == "pair"]
    assert {n for p in pairs for n in p.nodes} == set(NODES) and max(p.round for p in pairs) == 2
    assert all(r.passed for r in results if r.name == localize.RESULT)  # every pair passed: no pair shows it
    blocks = [p for p in detail.pairs if p.kind == "block"]
    # three rounds of halves, each round splitting only the half that was slow
    seen = [(p.round, p.nodes[0], len(p.nodes), p.busbw_gbps) for p in blocks]
    print(f"bisection (round, first node, nodes, busbw): {seen}; {detail.rounds} rounds in {detail.seconds} s")
    assert [(p.round, len(p.nodes)) for p in blocks] == [(3, 8), (3, 9), (4, 4), (4, 4), (5, 2), (5, 2)], seen
    assert all(p.parent is not None and set(p.nodes) < set(detail.pairs[p.parent].nodes) for p in blocks[2:])
    slow = [p.nodes for p in blocks if localize.block_slow(p, blocks, detail.ratio, detail.floor_gbps)]
    assert all(NODES[VICTIM] in nodes for nodes in slow) and len(slow) == 3, seen
    named = sorted(r.node for r in results if r.name == localize.BLOCK_RESULT and not r.passed)
    assert named == FINAL_BLOCK, seen
    assert detail.rounds == 5
