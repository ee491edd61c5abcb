"""`gpu-acceptance`: the one command line for the CRD, rendering, the operator and local runs.

Each subcommand imports what it needs when it runs, so `crd`, `render` and
`local` work without kopf or the Kubernetes client installed.

Exit codes, for every command (acceptance_workload.contract.exits has the rule): 0 yes
(passed, printed, rendered, judged), 1 no (a check failed, an invalid
manifest, no usable report yet, a delivery not judged), 2 could not answer
(bad arguments, unreadable input, API errors, any unexpected error).
"""

from __future__ import annotations

import argparse
import sys
import traceback

from acceptance_workload.contract import exits


def _cmd_crd(args: argparse.Namespace) -> int:
    from acceptance_operator.resource.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return exits.YES


def _cmd_render(args: argparse.Namespace) -> int:
    from acceptance_operator.render import render_file

    return render_file(args.file, sys.stdout, sys.stderr)


def _cmd_operator(args: argparse.Namespace) -> int:
    from acceptance_operator.runner import run_operator

    return run_operator(namespace=args.namespace, lease_namespace=args.lease_namespace, metrics_port=args.metrics_port,
                        health_port=args.health_port, json_logs=args.json_logs, verbose=args.verbose)


def _cmd_local(args: argparse.Namespace) -> int:
    from acceptance_workload.local import run_local

    from acceptance_operator.manifest_file import manifest_spec

    return run_local(args, manifest_spec)  # -f is read as `render` reads it: one verdict on a manifest


def build_parser() -> argparse.ArgumentParser:
    from acceptance_operator.plumbing.ports import DEFAULT_HEALTH_PORT, DEFAULT_METRICS_PORT

    parser = argparse.ArgumentParser(prog="gpu-acceptance", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("crd", help="print the AcceptanceTest CRD generated from the models")
    p.set_defaults(func=_cmd_crd)

    p = sub.add_parser("render", help="print every object the operator would create for an AcceptanceTest")
    p.add_argument("file", help="AcceptanceTest manifest (YAML), or - for standard input")
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("operator", help="run the operator against the current kubeconfig or in-cluster config")
    p.add_argument("--namespace", action="append", default=None,
                   help="watch only this namespace (repeatable); default: all namespaces")
    p.add_argument("--lease-namespace", metavar="NAMESPACE",
                   help="namespace of the leader Lease gpu-acceptance-operator that every replica of this operator "
                   "shares (one reconciles; default: the pod's namespace, else `default`)")
    p.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT,
                   help=f"port of /metrics (0: off; default {DEFAULT_METRICS_PORT})")
    p.add_argument("--health-port", type=int, default=DEFAULT_HEALTH_PORT,
                   help=f"port of the liveness endpoint /healthz (0: off; default {DEFAULT_HEALTH_PORT})")
    p.add_argument("--json-logs", action="store_true", help="log one JSON object per line")
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=_cmd_operator)

    from acceptance_operator.report_cli import add_parser as add_report_parser

    add_report_parser(sub)

    p = sub.add_parser("local", help="run the checks on this machine's GPUs (or a CPU smoke run)")
    p.add_argument("--cpu", action="store_true", help="CPU smoke run with gloo (2 processes, small sizes)")
    p.add_argument("--json", metavar="FILE", help="write the full report object to FILE (what `report --deliver` "
                   "delivers and `report --json` prints)")
    p.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML page with plots "
                   "(needs matplotlib: pip install 'gpu-acceptance[report]')")
    p.add_argument("--junit", metavar="FILE", help="also write the report as JUnit XML (one testcase per result)")
    p.add_argument("-f", "--file", metavar="MANIFEST",
                   help="take checks, profile and thresholds from this AcceptanceTest manifest")
    p.add_argument("--profile", help="threshold profile (default: the manifest's, else the one of the GPUs here)")
    p.add_argument("--gpus", type=int, help="GPUs this node must have (default: the manifest's gpusPerNode, else all "
                   "visible); fewer visible fails the preflight's gpu_count check. With --cpu: gloo processes (2)")
    p.add_argument("--quick", action="store_true", help="short sweep and few steps (minutes, not tens)")
    p.add_argument("--simulate-nodes", type=int, metavar="N",
                   help="split the processes into N simulated nodes sim-node-0..N-1 (NODE_NAME and NCCL_HOSTID "
                   "per node, so NCCL goes through its network path between them)")
    p.add_argument("--nccl-tests", metavar="DIR",
                   help="turn on checks.nccl.crossCheck with NVIDIA nccl-tests' binaries from DIR "
                   "(all_reduce_perf, ...; sets GPU_ACCEPTANCE_NCCL_TESTS_DIR for the run)")
    p.add_argument("--storage", metavar="DIR",
                   help="turn on checks.storage on DIR as the shared volume (consistency, throughput, a checkpoint); "
                   "with --simulate-nodes each node sees it through DIR/.views/<node> (a link to DIR made when "
                   "missing; point one elsewhere to see that node fail)")
    p.add_argument("--fsdp", action="store_true", help="turn on checks.fsdp (FSDP2 training)")
    p.add_argument("--soak", type=int, metavar="SECONDS",
                   help="turn on checks.soak for SECONDS (>= 10): after the other checks, GEMM on every GPU and "
                   "all_reduce between them, NVML watched every checks.soak.sampleSeconds, judged minute by minute")
    p.set_defaults(func=_cmd_local)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; an error it did not expect is exit 2 (could not answer), never Python's 1 (a failed check)."""
    args = build_parser().parse_args(argv)  # bad arguments: argparse exits 2
    try:
        return args.func(args)
    except Exception as e:
        traceback.print_exc()
        sys.stderr.write(f"gpu-acceptance {args.command}: error: {type(e).__name__}: {e}\n")
        return exits.CANNOT


if __name__ == "__main__":
    sys.exit(main())
