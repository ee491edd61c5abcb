"""Every rank's watch judged (pure: rank 0 runs it on the gathered records, the tests on records of their own).

Per GPU: the XIDs by the table (xids.py), each named with the GPU's serial and bus id and the check it came in; the
growth of each counter from the start to the end against its row; the fabric state. Per node: the fabric cliques,
each RDMA port's state and counters, and whether every rank watched. A signal a GPU or node does not offer is a
skip naming where and why, never a pass; a counter read at the start and not at the end fails (fail closed).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from acceptance_workload.checks.signals import ports, xids
from acceptance_workload.checks.signals.details import SignalsGpu, SignalsNode, SignalsPort, SignalsXid
from acceptance_workload.checks.signals.nvml import FABRIC_COMPLETED, FABRIC_STATES
from acceptance_workload.checks.signals.rules import (
    FABRIC,
    FABRIC_CLIQUES,
    GPU_COUNTERS,
    NVLINK_RESULTS,
    PORT_COUNTERS,
    PORT_HW_ERRORS,
    PORT_STATE,
    RULES,
    WATCHED,
    XID,
    XID_APPLICATION,
)
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import Skip

FABRIC_HELP = ("check the fabric manager on the node: systemctl status nvidia-fabricmanager; "
               "nvidia-smi -q | grep -A3 Fabric")
NVML_SIGNALS = (XID, *GPU_COUNTERS, FABRIC)
MAX_NAMED = 5  # XIDs or counters a message names (the rest counted)


class Judged:
    """What the judgement gives: results, skips (one per signal and reason, naming where) and the detail rows."""

    def __init__(self, thresholds: Any, estimated: Collection[str]):
        self.thresholds, self.estimated = thresholds, estimated
        self.results: list[CheckResult] = []
        self.skips: dict[tuple[str, str], list[str]] = {}

    def add(self, name: str, value: float | None, message: str, node: str, gpu: int | None = None,
            observed: str | None = None, passed: bool | None = None) -> CheckResult:
        r = RULES.result(name, value, self.thresholds, node=node, gpu=gpu, observed=observed, message=message,
                         passed=passed, estimated=self.estimated)
        self.results.append(r)
        return r

    def skip(self, name: str, reason: str, where: str) -> None:
        self.skips.setdefault((name, reason), []).append(where)

    def skipped(self) -> list[Skip]:
        out = []
        for (name, reason), where in self.skips.items():
            places = ", ".join(where[:8]) + (f" and {len(where) - 8} more" if len(where) > 8 else "")
            out.append(Skip(check="signals", name=name, reason=f"{reason} ({places})"[:1000]))
        return out


def who(rec: dict[str, Any]) -> str:
    """'node-a GPU 0 (serial 1650..., bus 0000:18:00.0)'."""
    return (f"node {rec['node']} GPU {rec['gpu']} (serial {rec.get('serial') or 'unknown'}, "
            f"bus {rec.get('busId') or 'unknown'})")


def judge(records: list[dict[str, Any]], thresholds: Any,
          estimated: Collection[str] = ()) -> tuple[list[CheckResult], list[Skip], list[SignalsNode]]:
    """Every rank's record (the gathered watches) -> (results, skips, each node's detail row)."""
    j = Judged(thresholds, estimated)
    nodes: dict[str, SignalsNode] = {}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for rec in sorted(records, key=lambda r: (r["node"], r["gpu"])):
        by_node.setdefault(rec["node"], []).append(rec)
    for node, recs in by_node.items():
        row = nodes.setdefault(node, SignalsNode(node=node))
        row.gpus = [judge_gpu(j, rec) for rec in recs]
        judge_cliques(j, node, recs)
        first = next((r for r in recs if r.get("ports") is not None), None)
        row.ports = judge_ports(j, node, first["ports"] if first else None)
        broken = [r for r in recs if r.get("error")]
        j.add(WATCHED, 0.0 if broken else 1.0, node=node,
              message="; ".join(f"rank {r['rank']}: {r['error']}" for r in broken)
              or f"node {node}: {len(recs)} rank(s) watched for {max(r.get('seconds', 0) for r in recs):.0f} s")
    return j.results, j.skipped(), list(nodes.values())


def judge_gpu(j: Judged, rec: dict[str, Any]) -> SignalsGpu:
    node, gpu = rec["node"], rec["gpu"]
    row = SignalsGpu(gpu=gpu, serial=rec.get("serial"), bus_id=rec.get("busId"))
    where = f"node {node} GPU {gpu}"
    if rec.get("nvml"):
        for name in NVML_SIGNALS:
            j.skip(name, rec["nvml"], where)
        row.skipped = list(NVML_SIGNALS)
        return row
    judge_xids(j, rec, row)
    for name in GPU_COUNTERS:
        judge_counter(j, rec, row, name)
    judge_fabric(j, rec, row)
    return row


def judge_xids(j: Judged, rec: dict[str, Any], row: SignalsGpu) -> None:
    unsupported = rec["unsupported"].get("xid")
    if unsupported and not rec["xids"]:
        j.skip(XID, f"XID events cannot be watched: {unsupported}", f"node {rec['node']} GPU {rec['gpu']}")
        row.skipped.append(XID)
        return
    failing, application = [], []
    for x in rec["xids"]:
        entry = xids.lookup(x["code"])
        row.xids.append(SignalsXid(code=x["code"], meaning=entry.meaning, fails=entry.fails, stage=x["stage"],
                                   t=x["t"]))
        (failing if entry.fails else application).append((x, entry))

    def said(found: list[tuple[dict[str, Any], xids.Xid]]) -> str:
        text = "; ".join(f"XID {x['code']} ({e.meaning}) during stage {x['stage']} at t={x['t']:.0f}s: {e.action}"
                         for x, e in found[:MAX_NAMED])
        return text + (f"; {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else "")

    count = len(failing) + rec.get("xidsOmitted", 0)
    lost = (rec.get("xidError") or {}).get("xid") or unsupported  # the watch stopped before the run's end
    j.add(XID, None if lost and not count else float(count), node=rec["node"], gpu=rec["gpu"],
          passed=False if lost else None,
          message=f"{who(rec)}: " + (said(failing) if count else "no XID of a failing kind")
          + (f"; {lost}, so the rest of the run was not watched (fail closed)" if lost else ""))
    if application:
        j.add(XID_APPLICATION, float(len(application)), node=rec["node"], gpu=rec["gpu"],
              message=f"{who(rec)}: recorded, not failing: {said(application)}")


def _keys(rec: dict[str, Any], name: str) -> list[str]:
    """The counters (signals.nvml names) a result reads, as this GPU has them."""
    counters, _ = GPU_COUNTERS[name]
    if name in NVLINK_RESULTS:
        return [k for k in rec["start"] if k.startswith("nvlink ") and k.rsplit(" ", 1)[-1] in counters]
    return [k for k in counters if k in rec["start"]]


def _unsupported(rec: dict[str, Any], name: str) -> str | None:
    counters, _ = GPU_COUNTERS[name]
    if name in NVLINK_RESULTS:
        said = [v for k, v in rec["unsupported"].items() if k.startswith("nvlink")]
        return said[0] if said else (f"no NVLink counter: {rec['noNvlink']}" if rec.get("noNvlink") else None)
    said = [rec["unsupported"].get(k) or rec["unsupported"].get("row_remaps" if "remap" in k else k)
            for k in (*counters, name)]
    return next((s for s in said if s), None)


def judge_counter(j: Judged, rec: dict[str, Any], row: SignalsGpu, name: str) -> None:
    """The largest growth among the result's counters, against its row; unsupported: a skip saying so."""
    where = f"node {rec['node']} GPU {rec['gpu']}"
    keys = _keys(rec, name)
    if not keys:
        reason = _unsupported(rec, name) or "not read at the run's start"
        j.skip(name, reason, where)
        row.skipped.append(name)
        return
    lost = [k for k in keys if k not in rec["end"]]
    if lost:
        j.add(name, None, node=rec["node"], gpu=rec["gpu"], passed=False,
              message=f"{who(rec)}: {', '.join(lost)} read at the run's start but not at its end")
        return
    grew = {k: rec["end"][k] - rec["start"][k] for k in keys}
    row.read.append(name)
    moved = {k: d for k, d in grew.items() if d != 0}
    row.moved.update(moved)
    top = max(grew.values())
    text = ("unchanged over the run" if not moved else "; ".join(
        f"{k} grew {d:g} (from {rec['start'][k]:g} to {rec['end'][k]:g})"
        for k, d in sorted(moved.items(), key=lambda kv: -kv[1])[:MAX_NAMED]))
    j.add(name, top, node=rec["node"], gpu=rec["gpu"], message=f"{who(rec)}: {text}")


def judge_fabric(j: Judged, rec: dict[str, Any], row: SignalsGpu) -> None:
    fabric = rec.get("fabric") or {"unsupported": "not read"}
    where = f"node {rec['node']} GPU {rec['gpu']}"
    if "unsupported" in fabric:
        j.skip(FABRIC, f"NVSwitch fabric state not offered: {fabric['unsupported']}", where)
        row.skipped.append(FABRIC)
        return
    if "error" in fabric:
        row.fabric = "unreadable"
        j.add(FABRIC, None, node=rec["node"], gpu=rec["gpu"], passed=False,
              message=f"{who(rec)}: the fabric state could not be read ({fabric['error']}); {FABRIC_HELP}")
        return
    state = FABRIC_STATES.get(fabric["state"], f"state {fabric['state']}")
    ok = fabric["state"] == FABRIC_COMPLETED and fabric["status"] == 0
    row.fabric = f"{state}, clique {fabric['clique']}" if ok else f"{state}, status {fabric['status']}"
    j.add(FABRIC, 1.0 if ok else 0.0, node=rec["node"], gpu=rec["gpu"], observed=state,
          message=f"{who(rec)}: NVSwitch fabric {state}, status {fabric['status']}, clique {fabric['clique']}"
          + ("" if ok else f" at the run's start: the GPU cannot reach its peers over NVSwitch; {FABRIC_HELP}"))


def judge_cliques(j: Judged, node: str, recs: list[dict[str, Any]]) -> None:
    """The node's GPUs (those whose fabric completed) in one clique of one cluster."""
    done = [r for r in recs if (r.get("fabric") or {}).get("state") == FABRIC_COMPLETED]
    if not done:
        return
    cliques: dict[tuple[str, int], list[int]] = {}
    for r in done:
        cliques.setdefault((r["fabric"]["cluster"], r["fabric"]["clique"]), []).append(r["gpu"])
    said = "; ".join(f"clique {c} (cluster {u[:8]}): GPU {', '.join(map(str, g))}" for (u, c), g in cliques.items())
    j.add(FABRIC_CLIQUES, float(len(cliques)), node=node,
          message=f"node {node}: {said}" + ("" if len(cliques) == 1 else f"; {FABRIC_HELP}"))


def judge_ports(j: Judged, node: str, seen: dict[str, Any] | None) -> list[SignalsPort]:
    """Each RDMA port of the node: up at the start and the end, and the growth of its error counters."""
    start = (seen or {}).get("start") or {"ports": [], "none": "the node's ports were not read"}
    end = (seen or {}).get("end") or {"ports": []}
    if not start["ports"]:
        j.skip("rdma_ports", start.get("none", "no RDMA port"), f"node {node}")
        return []
    later = {(p["device"], p["port"]): p for p in end["ports"]}
    return [judge_port(j, node, p, later.get((p["device"], p["port"]))) for p in start["ports"]]


def _up(p: dict[str, Any] | None) -> bool:
    return p is not None and p.get("state") == ports.ACTIVE and p.get("phys_state") == ports.LINK_UP


def judge_port(j: Judged, node: str, first: dict[str, Any], last: dict[str, Any] | None) -> SignalsPort:
    name = ports.label(first)
    at = f"node {node} {name}"
    row = SignalsPort(device=first["device"], port=first["port"], netdev=first.get("netdev"),
                      state=(last or first).get("state"), phys_state=(last or first).get("phys_state"),
                      rate=first.get("rate"))
    states = [f"{w} {p.get('state')}/{p.get('phys_state')}" for w, p in (("start", first), ("end", last)) if p]
    if not _up(first):  # a port the run cannot use (NCCL takes active ports): the preflight judges the ports
        row.problem = "not up at the start: not watched"
        j.skip(PORT_STATE, "not ACTIVE/LinkUp at the run's start, so no traffic of the run used it: not watched "
               "(the preflight judges the RDMA ports a multi-node run needs)", f"{at} {states[0]}")
        return row
    up = _up(last)
    if not up:
        row.problem = "down" if last is not None else "gone at the run's end"
    j.add(PORT_STATE, 1.0 if up else 0.0, node=node, observed=name,
          message=f"{at}: " + ("; ".join(states) if last is not None else f"{states[0]}; gone at the run's end")
          + ("" if up else ": the port is not ACTIVE/LinkUp (ibstat; check the cable, the switch port and the "
                           "subnet manager)"))
    if last is None:
        return row
    for counter in PORT_COUNTERS:
        _port_counter(j, node, at, name, counter, first, last, row)
    hw = {k: last["hw"][k] - v for k, v in first.get("hw", {}).items() if k in last.get("hw", {})}
    if hw:
        moved = {k: d for k, d in hw.items() if d}
        row.moved.update(moved)
        j.add(PORT_HW_ERRORS, max(hw.values()), node=node, observed=name,
              message=f"{at}: " + ("; ".join(f"{k} grew {d:g}" for k, d in moved.items()) or
                                   "extended error counters unchanged"))
    return row


def _port_counter(j: Judged, node: str, at: str, name: str, counter: str, first: dict[str, Any],
                  last: dict[str, Any], row: SignalsPort) -> None:
    if counter not in first["counters"] or counter not in last["counters"]:
        why = first["unreadable"].get(counter) or last["unreadable"].get(counter)
        if counter in first["counters"] or why:
            j.add(counter, None, node=node, observed=name, passed=False,
                  message=f"{at}: {counter} could not be read at the run's " +
                          ("end" if counter in first["counters"] else "start") + (f" ({why})" if why else ""))
        else:
            j.skip(counter, "the port has no such counter", at)
        return
    d = last["counters"][counter] - first["counters"][counter]
    if d:
        row.moved[counter] = d
    said = (f"{counter} grew {d:g} (from {first['counters'][counter]:g} to {last['counters'][counter]:g})" if d
            else f"{counter} unchanged")
    if counter == "link_downed" and d > 0:
        said += f": the link of {name} went down during the run"
    j.add(counter, d, node=node, observed=name, message=f"{at}: {said}")
