"""Pure parsers for the text Slurm's command-line tools print."""

import re

from clusters.slurm.types import PartitionInfo

_UNLIMITED = {"infinite", "unlimited", "none"}


def parse_time_minutes(text: str) -> int | None:
    """Slurm time (``7-00:00:00``, ``1:00:00``, ``30:00``, ``45``) in whole minutes.

    ``infinite``/``UNLIMITED`` give None. Seconds are rounded up: a limit of
    90 seconds lets a job run into its second minute.
    """
    value = text.strip().lower()
    if value in _UNLIMITED:
        return None
    days = 0
    if "-" in value:
        day_text, value = value.split("-", 1)
        days = int(day_text)
        # With days, the rest is hours[:minutes[:seconds]].
        parts = [int(p) for p in value.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
    else:
        parts = [int(p) for p in value.split(":")]
        if len(parts) == 3:
            hours, minutes, seconds = parts
        elif len(parts) == 2:
            hours, (minutes, seconds) = 0, parts
        elif len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        else:
            raise ValueError(f"not a Slurm time: {text!r}")
    total_seconds = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total_seconds // 60)


_GPU_GRES = re.compile(r"^gpu(?::(?P<type>[^:(]+))?:(?P<count>\d+)")


def parse_gpu_gres(text: str) -> tuple[str, int]:
    """GPU type and count per node from a GRES string like ``gpu:h200:8(S:0-1),shard:4``."""
    gpu_type, count = "", 0
    for item in text.split(","):
        match = _GPU_GRES.match(item.strip())
        if match:
            gpu_type = gpu_type or (match["type"] or "")
            count += int(match["count"])
    return gpu_type, count


SINFO_PARTITION_FORMAT = "%P|%a|%l|%D|%G"


def parse_sinfo_partitions(text: str) -> list[PartitionInfo]:
    """Partitions from ``sinfo -h -a -o '%P|%a|%l|%D|%G'``.

    sinfo prints one line per group of identical nodes, so a partition may
    span several lines; node and GPU counts add up across them.
    """
    merged: dict[str, dict] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, availability, time_limit, node_count, gres = line.split("|")
        is_default = name.endswith("*")
        name = name.rstrip("*")
        gpu_type, gpus_per_node = parse_gpu_gres(gres)
        nodes = int(node_count)
        entry = merged.setdefault(
            name,
            {
                "name": name,
                "is_default": is_default,
                "is_up": availability.strip().lower() == "up",
                "max_time_minutes": parse_time_minutes(time_limit),
                "nodes": 0,
                "gpus_per_node": 0,
                "gpu_type": "",
                "total_gpus": 0,
            },
        )
        entry["nodes"] += nodes
        entry["gpus_per_node"] = max(entry["gpus_per_node"], gpus_per_node)
        entry["gpu_type"] = entry["gpu_type"] or gpu_type
        entry["total_gpus"] += nodes * gpus_per_node
    return [PartitionInfo(**entry) for entry in merged.values()]
