"""The AcceptanceTest resource (gpu-acceptance.io/v1alpha1), as pure code: models and rules of its fields.

- api: the pydantic models of spec and status (the source of truth); crd: the CRD generated from them;
- conditions: condition types, phases and Reasons, set with Kubernetes semantics;
- kubetypes, envnames, podmeta, efa: validation of the Kubernetes types, env names, pod metadata and EFA fields
  the spec carries; spec_input: reading a manifest file (`render`);
- runs, schedule: which run a test is on, when the next is due (rerun annotation, cron) and status.history;
- soak: checks.soak's fit in the timeout and its progress in status; onpass: spec.onPass (the taints a pass
  may lift).

Imports: the workload's terms through the operator's door (acceptance_operator.workload) and nothing else of the
operator outside resource/. No Kubernetes calls.
"""
