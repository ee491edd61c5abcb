"""`gpu-acceptance render`: every object the operator would create for an AcceptanceTest, as YAML, no cluster."""

from __future__ import annotations

from typing import Any, TextIO

import yaml

from acceptance_operator.building.backends import build_children
from acceptance_operator.building.defaults import assumed
from acceptance_operator.building.manifests import resolve_image
from acceptance_operator.manifest_file import read_manifest
from acceptance_operator.resource.api import DEFAULT_OPERATOR_IMAGE, AcceptanceTest
from acceptance_operator.resource.spec_input import RenderError, parse_test
from acceptance_operator.workload import exits


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated values out in full: no &anchors / *aliases in manifests people read and kubectl applies."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def notes(test: AcceptanceTest) -> list[str]:
    """What the operator does beyond creating these objects (a sweep, node actions), and what was assumed for what
    the spec leaves to the cluster (backend, profile), as YAML comment lines."""
    from acceptance_operator.fleet.node_actions import PASSED_LABEL, describe
    from acceptance_operator.plumbing.policy import threshold_problem
    from acceptance_operator.resource.conditions import is_smoke

    spec, out = test.spec, assumed(test)
    if spec.sweep:
        busy = ("nodes whose GPUs other pods use are skipped (skipBusyNodes)" if spec.skip_busy_nodes
                else "nodes whose GPUs other pods use are tested too (skipBusyNodes: false)")
        if spec.skip_passed_nodes:
            busy += f"; nodes labelled {PASSED_LABEL} are skipped (skipPassedNodes)"
        out.append(f"sweep: a single-node test per node matching placement.nodeSelector, at most "
                   f"{spec.max_concurrent} at once; {busy}; each runs the objects below, pinned to its node")
    if spec.on_failure != "none":
        out.append(f"onFailure: the nodes a failed run blames are {describe(spec.on_failure)} "
                   "(needs the chart value nodeActions.enabled)")
    if spec.on_pass.enabled():
        what = [f"remove taint {', '.join(spec.on_pass.remove_taints)}"] if spec.on_pass.remove_taints else []
        what += ["uncordon if this operator cordoned it"] if spec.on_pass.uncordon else []
        what += [f"label {PASSED_LABEL}=<UTC date>"] if spec.on_pass.label else []
        out.append(f"onPass: each node a passed run measured: {'; '.join(what)} "
                   "(needs the chart value nodeActions.enabled)")
    if out and (spec.on_failure != "none" or spec.on_pass.enabled()) and not is_smoke(spec.profile):
        loose = threshold_problem(test)  # the namespace and image are the operator's settings to judge
        out += [f"nodes not changed by this test: {loose}"] if loose else []
    return [f"# {line}\n" for line in out]


def render(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> str:
    """The children as one YAML stream, after comment lines on what else the operator will do (notes)."""
    return "".join(notes(test)) + yaml.dump_all(build_children(test, init_image=init_image), Dumper=_PlainDumper,
                                                sort_keys=False, explicit_start=True, width=120)


def render_file(path: str, out: TextIO, err: TextIO) -> int:
    """`gpu-acceptance render`: 0 and the children on `out`; 1 invalid (errors on `err`); 2 unreadable.

    The operator's settings come from the same environment variables as the operator's (settings.py): what
    its policy refuses is refused here, the init container gets its image, and a test without spec.image the
    configured workload image.
    """
    from acceptance_operator.plumbing.policy import policy_problems, written_image_problems
    from acceptance_operator.plumbing.settings import OperatorSettings

    source = "standard input" if path == "-" else path
    settings = OperatorSettings.from_env()  # a bad setting is not the file's fault: SettingsError, exit 2 (cli)
    try:
        text = read_manifest(path)
    except OSError as e:
        err.write(f"error: cannot read {path}: {e}\n")
        return exits.CANNOT
    try:
        try:
            test = parse_test(text)
        except RenderError as e:
            raise RenderError([*written_image_problems(e.spec, settings), *e.lines]) from e
        problems = policy_problems(test, settings)
        if problems:
            raise RenderError(problems)
        resolved = resolve_image(test, settings.default_image, settings.workload_pull_secrets)
        rendered = render(resolved, init_image=settings.init_image)
    except RenderError as e:
        err.write(f"error: {source} is not a valid AcceptanceTest:\n")
        err.writelines(f"  {line}\n" for line in e.lines)
        return exits.NO
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:
        # The models should catch every malformed input; this keeps a miss from ending in a traceback.
        err.write(f"error: cannot render {source}: {type(e).__name__}: {e}\n")
        return exits.NO
    out.write(rendered)
    return exits.YES
