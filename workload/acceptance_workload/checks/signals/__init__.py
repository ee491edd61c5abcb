"""checks.signals: the fleet's own signals through every run, from the preflight's start to the last check's end.

- xids: the one table of XID codes (which fail the node, which applications cause, what to do);
- nvml: reading a GPU's error counters, XID events, identity and fabric state (the soak's watch reads with it too);
- ports: the RDMA ports from sysfs (state, physical state, error counters, interface);
- watch: one rank's watch, started before the preflight (checks.contract.Check.watch) and ended by the stage;
- judge: the gathered watches judged (pure); stage: ended, gathered, judged on rank 0;
- spec: its spec model (spec.checks.signals); rules: its rows of the rule table; profile: its share of the profiles;
  details: its field of the report (report.signals); parts: its text table, HTML grid and JUnit output;
  required: the results a report must hold of it.
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.signals.details import DETAILS
from acceptance_workload.checks.signals.parts import PARTS
from acceptance_workload.checks.signals.profile import PROFILE
from acceptance_workload.checks.signals.required import required
from acceptance_workload.checks.signals.rules import RULES
from acceptance_workload.checks.signals.spec import SignalsCheck
from acceptance_workload.checks.signals.stage import stage
from acceptance_workload.checks.signals.watch import start

CHECK = Check("signals", stage, RULES, spec=SignalsCheck, parts=PARTS, required=required, profile=PROFILE,
              details=DETAILS, watch=start)
