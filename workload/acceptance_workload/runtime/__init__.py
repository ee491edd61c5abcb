"""What every check's stage runs on: the ranks, the store they share, their liveness and their deaths.

- launch: torch.distributed's process group for this run (DistEnv, Session), and the launch errors;
- pinning: where a rank belongs (its GPU's NUMA-local CPUs, or its share of the pod's) and pinning it there at
  launch; gpus: which GPU a rank uses as NVML numbers it, and NVML itself;
- control, bounded_store: the control store (TCPStore) that carries heartbeats, blame and stage barriers;
- watchdog: each rank's heartbeat thread and the watchdog that names a silent or stuck rank;
- deaths: how a rank's process ended, as its parent saw it (exit code, signal, OOM kill);
- stages: the stage protocol (a check's stage is timed, its exceptions become results) shared by every check, and
  the run as a check's stage and watch see it (StageRunner); the hooks a check gives are checks/contract.py's;
- installation: `python -m acceptance_workload --check-install`: does this environment have what runs need.

Imports: contract/ and report/ only; torch only inside functions (the operator image imports nothing of it, but
the layering keeps it possible).
"""
