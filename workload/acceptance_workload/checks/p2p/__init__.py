"""checks.p2p: copies between every ordered pair of a node's GPUs, one way and both ways at once, and a small copy's
latency, with NVML's view of the path between them; a GPU whose pairs are low is named, and so is a single low pair.

- measure: the copies (copy engines in one process on GPUs; pairs of processes over gloo on a CPU smoke run);
- paths: NVML's view of the path between two GPUs (NVLink and its links, or the PCIe tree);
- judge: a node's matrix judged (pure): each GPU against the floors and its node's median GPU, each pair against the
  node's pairs of its path; stage: measured where the ranks are, judged on rank 0;
- spec: its spec model (spec.checks.p2p); rules: its rows of the rule table; profile: its share of the profiles;
  details: its field of the report (report.p2p); parts: its text table, HTML heat map and JUnit testcases per GPU;
  required: the results a report must hold of it; quick: its cut for `local --quick`.
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.p2p.details import DETAILS
from acceptance_workload.checks.p2p.parts import PARTS
from acceptance_workload.checks.p2p.profile import PROFILE
from acceptance_workload.checks.p2p.quick import quick
from acceptance_workload.checks.p2p.required import required
from acceptance_workload.checks.p2p.rules import RULES
from acceptance_workload.checks.p2p.spec import P2pCheck
from acceptance_workload.checks.p2p.stage import stage

CHECK = Check("p2p", stage, RULES, spec=P2pCheck, parts=PARTS, required=required, quick=quick, profile=PROFILE,
              details=DETAILS)
