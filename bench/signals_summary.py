"""The summary of bench/signals_gpu.sh's runs (issue 52): per run its verdict and, for checks.signals, each signal
read (its growth over the run) or skipped with its reason; at the end which signals the machine offers and whether
every run passed with every signal read and unchanged or skipped with a reason.

    python3 bench/signals_summary.py OUT_DIR   # OUT_DIR: quick1..10.json, full.json, exits.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
exits = dict(line.rsplit(" exit ", 1) for line in (out / "exits.txt").read_text().split("\n") if line)
offered, missing, bad = {}, {}, []
for name in [f"quick{i}" for i in range(1, 11)] + ["full"]:
    path = out / f"{name}.json"
    if not path.exists():
        print(f"{name}: exit {exits.get(name)}, NO REPORT")
        bad.append(name)
        continue
    r = json.loads(path.read_text())
    res = [x for x in r["results"] if x["check"] == "signals"]
    skips = [s for s in r["skipped"] if s["check"] == "signals"]
    failed = [x for x in r["results"] if not x["passed"]]
    print(f"{name}: exit {exits.get(name)}, passed {r.get('passed')}, {len(failed)} failed result(s), "
          f"signals {len(res)} read, {len(skips)} skipped")
    for x in res:
        where = f" GPU {x['gpu']}" if x.get("gpu") is not None else (f" {x['observed']}" if x.get("observed") else "")
        state = "unchanged" if x["value"] == 0 else f"value {x['value']}"
        if x["name"] in ("fabric", "port_state", "watched", "fabric_cliques"):
            state = f"value {x['value']}"
        print(f"  read    {x['name']}{where}: {state}, {'pass' if x['passed'] else 'FAIL'} ({x['message'][:160]})")
        offered.setdefault(x["name"], 0)
        if x["name"] not in ("fabric", "port_state", "watched", "fabric_cliques", "xid_application") and x["value"]:
            bad.append(f"{name}: {x['name']} moved ({x['value']})")
    for s in skips:
        print(f"  skipped {s['name']}: {s['reason'][:200]}")
        missing[s["name"]] = s["reason"][:200]
    for node in (r.get("signals") or {}).get("nodes", []):
        for g in node["gpus"]:
            for x in g["xids"]:
                print(f"  XID {x['code']} on {node['node']} GPU {g['gpu']} in {x['stage']} at {x['t']} s")
    if not r.get("passed") or failed:
        bad.append(f"{name}: not passed")
print()
print("this machine offers (read): " + ", ".join(sorted(offered)))
print("this machine does not offer (skipped): " + "; ".join(f"{k}: {v}" for k, v in sorted(missing.items())))
print("VERDICT: " + ("every run passed with every signal read and unchanged or skipped with a reason" if not bad
                     else "NOT MET: " + "; ".join(bad)))
