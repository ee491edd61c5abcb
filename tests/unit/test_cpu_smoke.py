"""spec.profile cpu-smoke: gloo on CPU pods that request no GPU; a smoke verdict (SmokePassed), never a hardware
one, judged only against a cpu-smoke run, and never acting on nodes."""

from __future__ import annotations

import yaml
from acceptance_operator.building.job_builders import torchrun_command
from acceptance_operator.building.manifests import build_workload_config
from acceptance_operator.judging.assessment import Observation, assess
from acceptance_operator.judging.rejudge import RunFacts
from acceptance_operator.plumbing.settings import OperatorSettings
from acceptance_operator.render import render
from acceptance_operator.resource.conditions import PASSED, SMOKE_PASSED, is_smoke
from acceptance_workload.checks.gpu.profile import CPU_RATIO_TO_MEDIAN
from acceptance_workload.configuration.profiles import resolve_checks
from acceptance_workload.contract.profiles import CPU_SMOKE, PROFILE_NAMES

from tests.reports import node_names, passing_report
from tests.unit.operator_samples import T0, job, pod
from tests.unit.test_manifests import gpu_pod_specs, make

TIMING = OperatorSettings().timing()


def render_pods(test) -> list[dict]:
    """The pod specs `gpu-acceptance render` prints for the test (the job's GPU pods)."""
    jobs = [o for o in yaml.safe_load_all(render(test)) if o and o["kind"] in ("Job", "JobSet", "PyTorchJob")]
    return [spec for j in jobs for spec in gpu_pod_specs(j)]
SMOKE = {"profile": "cpu-smoke", "backend": "Job", "nodes": 1, "gpusPerNode": 2}


def observation(config, report) -> Observation:
    pods = [pod(f"t-g1-{i}", "Running", node=n) for i, n in enumerate(node_names(config.nodes))]
    return Observation(generation=config.test.generation, run_id=config.test.run, job_kind="Job", job_name="t-g1",
                       timeout_seconds=3600, gpus_per_node=2,
                       start_time=T0, raw_report=report.to_wire(), job=job(name="t-g1"), pods=pods, events=[],
                       run=RunFacts(config, config.test.uid))


def test_the_workload_runs_the_smoke_checks_with_gloo():
    config = build_workload_config(make(SMOKE))
    assert (config.mode, config.profile, config.gpus_per_node) == ("cpu-smoke", "cpu-smoke", 2)
    assert config.checks.ddp.steps == 6 and config.checks.gpu.gemm_size == 512
    assert config.checks.gpu.thresholds.min_ratio_to_node_median == CPU_RATIO_TO_MEDIAN
    assert config.checks.gpu.thresholds.min_gemm_tflops is None  # no GPU floor
    assert build_workload_config(make({"profile": "h100-sxm"})).mode == "gpu"


def test_the_profile_is_wired_like_the_others():
    assert CPU_SMOKE == "cpu-smoke" and CPU_SMOKE in PROFILE_NAMES
    resolved = resolve_checks(make(SMOKE).spec.checks, "cpu-smoke", 1, 2)
    assert resolved.gpu.thresholds.min_ratio_to_node_median == CPU_RATIO_TO_MEDIAN
    assert resolved.preflight.thresholds.gpu_model is None and resolved.preflight.thresholds.min_ib_rate_gbps is None
    assert is_smoke("cpu-smoke") and not is_smoke("h100-sxm") and not is_smoke("custom")


def test_render_shows_pods_that_request_no_gpu():
    pods = render_pods(make(SMOKE))
    assert pods, "render shows the smoke run's pods"
    for spec in pods:
        for container in spec["containers"]:
            assert "nvidia.com/gpu" not in container.get("resources", {}).get("requests", {})
            assert "nvidia.com/gpu" not in container.get("resources", {}).get("limits", {})
    gpu_pods = render_pods(make({"profile": "h100-sxm", "backend": "Job"}))
    assert gpu_pods[0]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_a_single_node_run_rendezvouses_inside_its_pod():
    assert torchrun_command(make(SMOKE))[:2] == ["torchrun", "--standalone"]
    assert "--standalone" not in torchrun_command(make({**SMOKE, "nodes": 2}))


def test_a_passing_smoke_report_is_a_smoke_verdict_not_checks_passed():
    config = build_workload_config(make(SMOKE))
    report = passing_report(config).model_copy(update={"mode": "cpu-smoke"})
    a = assess(observation(config, report), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Succeeded", SMOKE_PASSED) and SMOKE_PASSED != PASSED
    assert "not a hardware verdict" in a.state.message
    # What a CPU run cannot measure (GPU count, host<->device copies; the workload skips them) is not required.
    cpu_only = report.model_copy(update={"results": [
        r for r in report.results if r.name != "gpu_count" and not r.name.startswith(("h2d", "d2h"))]})
    assert len(cpu_only.results) < len(report.results)
    assert assess(observation(config, cpu_only), T0, TIMING).state.reason == SMOKE_PASSED


def test_a_gpu_report_does_not_pass_a_smoke_run_nor_a_smoke_report_a_gpu_run():
    config = build_workload_config(make(SMOKE))
    a = assess(observation(config, passing_report(config)), T0, TIMING)  # mode gpu
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportRejected")
    assert "it is a gpu report, but the run is a cpu-smoke run" in a.state.message
    failed = passing_report(config).model_copy(update={"mode": "cpu-smoke"})
    failed.results = [r for r in failed.results if r.check != "ddp"]  # a missing measurement fails (fail closed)
    a = assess(observation(config, failed), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ChecksFailed")
