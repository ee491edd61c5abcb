"""Who this process is in the job, and how it joins the others.

Every launcher's ranks pass through start(), which first pins the rank to its
GPU's NUMA-local CPUs (pinning.pin; on CPU runs its even share of the pod's).

torchrun (PyTorchJob) sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR itself;
mpirun (MPIJob) sets OpenMPI's OMPI_COMM_WORLD_* instead, which
torch.distributed does not read, so they are mapped here. The rendezvous
store is kept (not hidden inside init_process_group) because the control
plane (control.py) uses it to exchange results and to find a hung rank
without relying on the very collectives under test.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from acceptance_workload.runtime.control import Control, RankInfo

if TYPE_CHECKING:
    import torch

Launcher = Literal["torchrun", "mpirun", "single"]
DEFAULT_MASTER_PORT = 29500
# The process group's own timeout sits past the watchdog's, so the watchdog
# (which names the hung rank and writes the report) always fires first.
PG_TIMEOUT_GRACE_SECONDS = 120


class LaunchError(RuntimeError):
    """The launcher's environment does not describe a valid rank of a job."""


def _int(environ: Mapping[str, str], name: str) -> int:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        raise LaunchError(f"{name} is not set")
    try:
        return int(raw)
    except ValueError:
        raise LaunchError(f"{name}={raw!r} is not an integer") from None


def mpi_to_torch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed's variables from OpenMPI's (or MPICH/Hydra's PMI_*) for an mpirun launch.

    MASTER_ADDR / MASTER_PORT come from the launcher (the MPIJob exports them
    with `mpirun -x`); rank 0 runs on the first worker and hosts the store there.
    """
    if "OMPI_COMM_WORLD_RANK" in environ:
        names = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
    elif "PMI_RANK" in environ:
        names = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
    else:
        raise LaunchError("no MPI rank variables (OMPI_COMM_WORLD_RANK or PMI_RANK) in the environment")
    rank, size, local_rank, local_size = (_int(environ, n) for n in names)
    if not environ.get("MASTER_ADDR"):
        raise LaunchError(
            "MASTER_ADDR is not set under mpirun: the MPIJob launcher must export it "
            "(mpirun -x MASTER_ADDR -x MASTER_PORT) so the ranks can rendezvous"
        )
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        "MASTER_ADDR": environ["MASTER_ADDR"],
        "MASTER_PORT": environ.get("MASTER_PORT") or str(DEFAULT_MASTER_PORT),
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job, read from the launcher's environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    node: str
    launcher: Launcher

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> DistEnv:
        env = dict(os.environ if environ is None else environ)
        if "OMPI_COMM_WORLD_RANK" in env or ("PMI_RANK" in env and "RANK" not in env):
            env.update(mpi_to_torch_env(env))
            launcher: Launcher = "mpirun"
        elif "RANK" in env:
            launcher = "torchrun"
        else:
            env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                       MASTER_ADDR=env.get("MASTER_ADDR", "127.0.0.1"),
                       MASTER_PORT=env.get("MASTER_PORT") or str(free_port()))
            launcher = "single"
        rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local_rank = _int(env, "LOCAL_RANK") if env.get("LOCAL_RANK") else 0
        local_world = _int(env, "LOCAL_WORLD_SIZE") if env.get("LOCAL_WORLD_SIZE") else 1
        if world < 1 or not 0 <= rank < world:
            raise LaunchError(f"RANK={rank} is not within WORLD_SIZE={world}")
        if local_world < 1 or not 0 <= local_rank < local_world:
            raise LaunchError(f"LOCAL_RANK={local_rank} is not within LOCAL_WORLD_SIZE={local_world}")
        if not env.get("MASTER_ADDR"):
            raise LaunchError("MASTER_ADDR is not set: the launcher must say where rank 0's store listens")
        port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT") else DEFAULT_MASTER_PORT
        node = env.get("NODE_NAME") or socket.gethostname()
        return cls(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world,
                   master_addr=env["MASTER_ADDR"], master_port=port, node=node, launcher=launcher)

    def torch_env(self) -> dict[str, str]:
        """The variables torch.distributed's env:// rendezvous reads."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }

    def describe(self) -> str:
        return f"rank {self.rank} (node {self.node}, GPU {self.local_rank})"


@dataclass
class Group:
    """A set of ranks measured together: the whole job, one node's GPUs, or two nodes' (localize.py)."""

    scope: Literal["job", "node", "pair"]
    ranks: list[int]
    rank: int  # this process's rank inside the group
    pg: Any  # torch ProcessGroup, None for the default (whole job) group
    node: str | None = None

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass
class Session:
    """A joined job: the process group, the control plane and who runs where."""

    env: DistEnv
    backend: Literal["nccl", "gloo"]
    device: torch.device
    control: Control
    ranks: list[RankInfo]
    collective_timeout: float

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def is_root(self) -> bool:
        return self.env.rank == 0

    def nodes(self) -> list[str]:
        """Node names in order of their lowest rank."""
        seen: dict[str, None] = {}
        for info in sorted(self.ranks, key=lambda i: i.rank):
            seen.setdefault(info.node, None)
        return list(seen)

    def node_ranks(self, node: str) -> list[int]:
        return sorted(i.rank for i in self.ranks if i.node == node)

    def job_group(self) -> Group:
        return Group(scope="job", ranks=list(range(self.world_size)), rank=self.rank, pg=None)

    def node_groups(self) -> tuple[dict[str, list[int]], Group]:
        """One process group per node (every rank creates all of them, in the same order); returns its own."""
        import torch.distributed as dist

        own: Group | None = None
        members = {node: self.node_ranks(node) for node in self.nodes()}
        for node, ranks in members.items():
            pg = dist.new_group(ranks)
            if self.env.node == node:
                own = Group(scope="node", ranks=ranks, rank=ranks.index(self.rank), pg=pg, node=node)
        assert own is not None, f"this rank's node {self.env.node} has no group"
        return members, own

    def describe(self, rank: int) -> str:
        return self.control.describe(rank)


def start(env: DistEnv, backend: Literal["nccl", "gloo"], *, rendezvous_timeout: float,
          collective_timeout: float) -> Session:
    """Rendezvous, learn every rank's node and GPU through the store, then create the process group."""
    import torch
    import torch.distributed as dist

    from acceptance_workload.runtime import pinning

    os.environ.update(env.torch_env())
    # Before any thread of the process group or the control plane exists: they inherit the CPUs.
    print(f"gpu-acceptance: {env.describe()}: {pinning.pin(backend == 'nccl', env.local_rank, env.local_world_size)}",
          file=sys.stderr, flush=True)
    if backend == "nccl":
        if not torch.cuda.is_available() or torch.cuda.device_count() <= env.local_rank:
            raise LaunchError(
                f"{env.describe()}: no CUDA device {env.local_rank} "
                f"(torch sees {torch.cuda.device_count() if torch.cuda.is_available() else 0})"
            )
        torch.cuda.set_device(env.local_rank)
        device = torch.device("cuda", env.local_rank)
    else:
        device = torch.device("cpu")
    try:
        store, _, _ = next(dist.rendezvous("env://", rank=env.rank, world_size=env.world_size,
                                           timeout=timedelta(seconds=rendezvous_timeout)))
    except Exception as e:  # the store's own error says how many ranks joined
        raise LaunchError(
            f"rendezvous at {env.master_addr}:{env.master_port} did not complete within "
            f"{rendezvous_timeout:.0f}s for {env.describe()}: {e}"
        ) from e
    store.set_timeout(timedelta(seconds=collective_timeout))
    control = Control(dist.PrefixStore("gpu-acceptance", store), env.rank, env.world_size,
                      timeout=collective_timeout, master=(env.master_addr, env.master_port))
    me = RankInfo(rank=env.rank, node=env.node, gpu=env.local_rank, host=socket.gethostname(), pid=os.getpid())
    ranks = [RankInfo(**d) for d in control.allgather("rank-info", asdict(me))]
    control.set_ranks(ranks)
    dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                            world_size=env.world_size,
                            timeout=timedelta(seconds=collective_timeout + PG_TIMEOUT_GRACE_SECONDS))
    return Session(env=env, backend=backend, device=device, control=control, ranks=ranks,
                   collective_timeout=collective_timeout)


def abort_collectives() -> None:
    """Abort every process group of this rank, from any thread: a collective blocked in it (waiting for a rank
    that raised and left the stage, stages.py) ends with an error, and gloo peers' pending ones too."""
    import torch.distributed as dist

    with contextlib.suppress(Exception):
        dist.distributed_c10d._abort_process_group()


def renew(session: Session, name: str) -> None:
    """A new default process group, every rank at once, after a rank raised inside stage `name` (stages.py): the
    old one was aborted, or holds a collective some rank left half done."""
    import torch.distributed as dist

    with contextlib.suppress(Exception):  # already gone when it was aborted
        dist.destroy_process_group()
    dist.init_process_group(session.backend, store=dist.PrefixStore(f"pg-after-{name}", session.control.store),
                            rank=session.rank, world_size=session.world_size,
                            timeout=timedelta(seconds=session.collective_timeout + PG_TIMEOUT_GRACE_SECONDS))


def stop(session: Session | None) -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
