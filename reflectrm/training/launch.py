"""Where this process stands in a training launch: its rank and how many processes train together.

    proc = launched()          # Processes(rank=0, world_size=2) under `torchrun --nproc_per_node 2`
    if proc.main: ...          # only rank 0 writes the run folder and prints the result

torchrun and `accelerate launch --multi_gpu` (which runs torchrun) set RANK and WORLD_SIZE; an MPI
launch (accelerate's multi-CPU form, `--mpirun_hostfile`) sets its own names, read in the order
accelerate reads them. `accelerate launch --cpu --num_processes N` without MPI starts ONE process
that knows nothing of the N asked for: it is refused here rather than trained as one process.
Only the standard library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from reflectrm.errors import InputError

RANK_VARIABLES = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
"""The launchers' names for a process's global rank and the process count, in the order accelerate reads them."""

MAX_PROCESSES = 1 << 20  # past any cluster: a larger WORLD_SIZE is a damaged environment, not a launch

TORCHRUN_CPU = "torchrun --nproc_per_node N -m reflectrm_app.commands.train train ... --device cpu"


@dataclass(frozen=True, slots=True)
class Processes:
    """One process of a launch: its global rank (0: the main process) and the number of processes."""

    rank: int = 0
    world_size: int = 1

    @property
    def main(self) -> bool:
        """The process that writes the run folder (status, metrics, completions, final model) and reports."""
        return self.rank == 0


def launched(environ: Mapping[str, str] | None = None) -> Processes:
    """This process's place in its launch, from the launcher's environment (none: one process).

    Raises `InputError` (one line, with the fix) for a rank or count that is not a whole number in range, and
    for accelerate's CPU launcher asked for several processes without MPI (it starts one)."""
    env = os.environ if environ is None else environ
    size_name = next((name for name in SIZE_VARIABLES if env.get(name, "").strip()), None)
    if size_name is None:
        if _accelerate_cpu_without_mpi(env):
            raise InputError("`accelerate launch --cpu` started one process, not the several --num_processes asked "
                             "for (its CPU launcher starts several only through MPI, --mpirun_hostfile): launch with "
                             f"`{TORCHRUN_CPU}` or `accelerate launch --multi_gpu --num_processes N ... --device cpu`")
        return Processes()
    world_size = _whole(env, size_name, least=1, most=MAX_PROCESSES)
    rank_name = next((name for name in RANK_VARIABLES if env.get(name, "").strip()), None)
    rank = 0 if rank_name is None else _whole(env, rank_name, least=0, most=world_size - 1)
    return Processes(rank=rank, world_size=world_size)


def _whole(env: Mapping[str, str], name: str, *, least: int, most: int) -> int:
    text = env[name].strip()
    if not (text.isascii() and text.isdigit() and least <= int(text) <= most):
        raise InputError(f"the launcher's {name}={text[:20]!r} is not a whole number from {least} to {most}: "
                         "start the run with torchrun or accelerate launch, or unset it to train in one process")
    return int(text)


def _accelerate_cpu_without_mpi(env: Mapping[str, str]) -> bool:
    """accelerate's simple launcher with --cpu and several processes: it sets MASTER_ADDR for them (and nothing that
    says how many), then runs one process (`accelerate.utils.launch.prepare_simple_launcher_cmd_env`)."""
    return env.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes") and bool(env.get("MASTER_ADDR"))
