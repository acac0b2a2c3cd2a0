"""Typed results of the Slurm client protocol."""

from dataclasses import dataclass


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    is_default: bool
    is_up: bool
    max_time_minutes: int | None  # None: no limit
    nodes: int
    gpus_per_node: int
    gpu_type: str
    total_gpus: int
