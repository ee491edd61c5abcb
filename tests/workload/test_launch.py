"""The launcher's environment: torchrun's, OpenMPI's (mapped), MPICH/Hydra's, and a lone process."""

from __future__ import annotations

import pytest
from acceptance_workload.runtime.launch import DistEnv, LaunchError, mpi_to_torch_env

MPI = {
    "OMPI_COMM_WORLD_RANK": "13", "OMPI_COMM_WORLD_SIZE": "16",
    "OMPI_COMM_WORLD_LOCAL_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    "MASTER_ADDR": "at-g1-worker-0.at-g1.gpu-tests.svc", "MASTER_PORT": "29500", "NODE_NAME": "gpu-node-2",
}


def test_openmpi_variables_become_torch_distributed_ones() -> None:
    assert mpi_to_torch_env(MPI) == {
        "RANK": "13", "WORLD_SIZE": "16", "LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "at-g1-worker-0.at-g1.gpu-tests.svc", "MASTER_PORT": "29500",
    }
    env = DistEnv.from_environ(MPI)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (13, 16, 5, 8)
    assert env.launcher == "mpirun" and env.node == "gpu-node-2"
    assert env.describe() == "rank 13 (node gpu-node-2, GPU 5)"
    assert env.torch_env()["RANK"] == "13"


def test_mpich_hydra_variables_are_mapped_too() -> None:
    env = DistEnv.from_environ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
                                "MASTER_ADDR": "h", "NODE_NAME": "n"})
    assert (env.rank, env.world_size, env.local_rank, env.master_port) == (1, 2, 1, 29500)


def test_mpirun_without_master_addr_says_what_the_launcher_must_export() -> None:
    env = {k: v for k, v in MPI.items() if k != "MASTER_ADDR"}
    with pytest.raises(LaunchError, match=r"MASTER_ADDR is not set under mpirun.*mpirun -x MASTER_ADDR"):
        DistEnv.from_environ(env)


def test_a_malformed_mpi_variable_is_named() -> None:
    with pytest.raises(LaunchError, match="OMPI_COMM_WORLD_LOCAL_SIZE='eight' is not an integer"):
        DistEnv.from_environ({**MPI, "OMPI_COMM_WORLD_LOCAL_SIZE": "eight"})


def test_torchrun_variables_are_read_as_they_are() -> None:
    env = DistEnv.from_environ({"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8",
                                "MASTER_ADDR": "at-g1-master-0", "MASTER_PORT": "23456", "NODE_NAME": "n2"})
    assert env.launcher == "torchrun" and (env.rank, env.local_rank, env.master_port) == (9, 1, 23456)


def test_rank_outside_the_world_is_rejected() -> None:
    with pytest.raises(LaunchError, match="RANK=4 is not within WORLD_SIZE=4"):
        DistEnv.from_environ({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h"})
    with pytest.raises(LaunchError, match="LOCAL_RANK=8 is not within LOCAL_WORLD_SIZE=8"):
        DistEnv.from_environ({"RANK": "0", "WORLD_SIZE": "16", "LOCAL_RANK": "8", "LOCAL_WORLD_SIZE": "8",
                              "MASTER_ADDR": "h"})


def test_a_lone_process_is_rank_0_of_1_on_a_free_local_port() -> None:
    env = DistEnv.from_environ({"NODE_NAME": "box"})
    assert (env.rank, env.world_size, env.master_addr, env.launcher) == (0, 1, "127.0.0.1", "single")
    assert 0 < env.master_port < 65536
