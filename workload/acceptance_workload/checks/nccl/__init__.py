"""checks.nccl: the NCCL collectives, measured the way nccl-tests measures them, and who to blame.

- ncclstage: the check's stage (sweep, transports, localisation, cross-check);
- nccl: the message-size sweep of each collective (algbw/busbw, correctness); collectives: the operations;
- transport: the transport NCCL actually used (NVLink P2P, NET/IB with or without GDRDMA, sockets);
- latency: small-message all_reduce latency; localize: pairwise tests and bisection that name a slow node;
- nccltests: nccl-tests' binaries run beside the sweep as a cross-check.
- spec: its spec model (spec.checks.nccl); rules: its rows of the rule table (how each result it writes is judged);
  profile: its share of the profiles' defaults (busbw floors and latency ceilings per GPU model, which are estimates,
  what holds for one node or several, a GPU count and a fabric, its cut for a CPU smoke run); rejudge: its part of
  the operator's re-judging (its inter-node rows from the pair rows; which failure says the job failed).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.nccl.details import DETAILS
from acceptance_workload.checks.nccl.ncclstage import stage
from acceptance_workload.checks.nccl.parts import PARTS
from acceptance_workload.checks.nccl.profile import PROFILE
from acceptance_workload.checks.nccl.quick import quick
from acceptance_workload.checks.nccl.rejudge import REJUDGE
from acceptance_workload.checks.nccl.required import required
from acceptance_workload.checks.nccl.rules import RULES
from acceptance_workload.checks.nccl.spec import NcclCheck

CHECK = Check("nccl", stage, RULES, spec=NcclCheck, parts=PARTS, required=required, quick=quick,
              profile=PROFILE, details=DETAILS, rejudge=REJUDGE)
