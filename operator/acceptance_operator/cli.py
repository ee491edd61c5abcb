"""`gpu-acceptance`: the one command line for the CRD, rendering, the operator and local runs.

Each subcommand imports what it needs when it runs, so `crd`, `render` and
`local` work without kopf or the Kubernetes client installed.

Exit codes, for every command (acceptance_workload.contract.exits has the rule): 0 yes
(passed, printed, rendered, judged), 1 no (a check failed, an invalid
manifest, no usable report yet, a delivery not judged), 2 could not answer
(bad arguments, unreadable input, API errors, any unexpected error).

No traceback reaches a user: an error no command expected is one line and exit 2, its trace only under
`gpu-acceptance --debug ...` (or GPU_ACCEPTANCE_DEBUG=1). A reader that closes the pipe early (`crd | head -1`)
ends the command quietly with exit 2 (the answer was not read whole).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
from collections.abc import Callable

from acceptance_operator.workload import exits


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
    from acceptance_operator.manifest_file import manifest_spec
    from acceptance_operator.workload import run_local

    # -f is read as `render` reads it (one verdict on a manifest), with the checks this command line turns on
    # (--soak, --fsdp) on, as the run will have them: a manifest that switches every other check off is valid then.
    turn_on = {**({"soak": {"durationSeconds": args.soak}} if args.soak is not None else {}),
               **({"fsdp": {}} if args.fsdp else {})}
    return run_local(args, functools.partial(manifest_spec, turn_on=turn_on))


# `local`'s counts at most: a node has 8 GPUs (16 at the very most); a CPU smoke run of more gloo processes than
# this on one machine measures nothing but the scheduler.
MAX_LOCAL_PROCESSES = 64


def _count(maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to `maximum` (argparse names the flag: exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not 1 <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value}: give a number from 1 to {maximum}")
        return value

    parse.__name__ = "count"
    return parse


def _given(what: str) -> Callable[[str], str]:
    """An argparse type: a non-empty value (an empty path or name would be taken as "not given")."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"an empty {what}; give one or leave the option out")
        return text

    parse.__name__ = what
    return parse


def _profile(text: str) -> str:
    from acceptance_operator.workload import PROFILE_NAMES

    if text not in PROFILE_NAMES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a profile; use one of {', '.join(PROFILE_NAMES)}")
    return text


def build_parser() -> argparse.ArgumentParser:
    from acceptance_operator.plumbing.ports import DEFAULT_HEALTH_PORT, DEFAULT_METRICS_PORT

    parser = argparse.ArgumentParser(prog="gpu-acceptance", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help="print the Python trace of an unexpected error (also: GPU_ACCEPTANCE_DEBUG=1)")
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

    _add_local_parser(sub)
    return parser


def _add_local_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("local", help="run the checks on this machine's GPUs (or a CPU smoke run)")
    p.add_argument("--cpu", action="store_true", help="CPU smoke run with gloo (2 processes, small sizes)")
    path = _given("path")
    p.add_argument("--json", metavar="FILE", type=path, help="write the full report object to FILE (what "
                   "`report --deliver` delivers and `report --json` prints)")
    p.add_argument("--html", metavar="FILE", type=path, help="also write the report as one self-contained HTML page "
                   "with plots (needs matplotlib: pip install 'gpu-acceptance[report]')")
    p.add_argument("--junit", metavar="FILE", type=path,
                   help="also write the report as JUnit XML (one testcase per result)")
    p.add_argument("-f", "--file", metavar="MANIFEST", type=path,
                   help="take checks, profile and thresholds from this AcceptanceTest manifest")
    p.add_argument("--profile", type=_profile,
                   help="threshold profile (default: the manifest's, else the one of the GPUs here)")
    p.add_argument("--gpus", type=_count(MAX_LOCAL_PROCESSES),
                   help="GPUs this node must have (default: the manifest's gpusPerNode, else all "
                   "visible); fewer visible fails the preflight's gpu_count check. With --cpu: gloo processes (2). "
                   f"1 to {MAX_LOCAL_PROCESSES}")
    p.add_argument("--quick", action="store_true", help="short sweep and few steps (minutes, not tens)")
    p.add_argument("--simulate-nodes", type=_count(MAX_LOCAL_PROCESSES), metavar="N",
                   help="split the processes into N simulated nodes sim-node-0..N-1 (NODE_NAME and NCCL_HOSTID "
                   "per node, so NCCL goes through its network path between them)")
    p.add_argument("--nccl-tests", metavar="DIR", type=path,
                   help="turn on checks.nccl.crossCheck with NVIDIA nccl-tests' binaries from DIR "
                   "(all_reduce_perf, ...; sets GPU_ACCEPTANCE_NCCL_TESTS_DIR for the run)")
    p.add_argument("--storage", metavar="DIR", type=path,
                   help="turn on checks.storage on DIR as the shared volume (consistency, throughput, a checkpoint); "
                   "with --simulate-nodes each node sees it through DIR/.views/<node> (a link to DIR made when "
                   "missing; point one elsewhere to see that node fail)")
    p.add_argument("--fsdp", action="store_true", help="turn on checks.fsdp (FSDP2 training)")
    p.add_argument("--soak", type=int, metavar="SECONDS",
                   help="turn on checks.soak for SECONDS (>= 10): after the other checks, GEMM on every GPU and "
                   "all_reduce between them, NVML watched every checks.soak.sampleSeconds, judged minute by minute")
    p.set_defaults(func=_cmd_local)


def _debug(args: argparse.Namespace | None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("GPU_ACCEPTANCE_DEBUG", "") not in ("", "0")


def _closed_pipe() -> int:
    """The reader went away (`| head`): say nothing more, and keep Python's exit flush from raising again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return exits.CANNOT


def main(argv: list[str] | None = None) -> int:
    """Run one command; an error it did not expect is exit 2 (could not answer), never Python's 1 (a failed check)."""
    args = None
    try:
        args = build_parser().parse_args(argv)  # bad arguments: argparse exits 2
        return args.func(args)
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:
        sys.stderr.write("gpu-acceptance: interrupted\n")
        return exits.CANNOT
    except Exception as e:
        from acceptance_operator.plumbing.settings import SettingsError

        command = getattr(args, "command", None) or "(starting)"
        if isinstance(e, SettingsError):
            sys.stderr.write(f"gpu-acceptance {command}: error: an operator setting cannot be used: {e}\n")
            return exits.CANNOT
        if _debug(args):
            traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0][:300]
        sys.stderr.write(f"gpu-acceptance {command}: error: {type(e).__name__}: {first}"
                         + ("" if _debug(args) else " (gpu-acceptance --debug shows where)") + "\n")
        return exits.CANNOT


if __name__ == "__main__":
    sys.exit(main())
