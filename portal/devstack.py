"""What the dev machine's scripts say about the clusters they run (dev only).

``dev/stack`` runs ``portal-dev`` on the host's Slurm; ``dev/cluster-next`` runs
``portal-next`` in a root of its own, whose tools the worker reaches through the
command and run-as prefixes its ``env`` prints. Seeding and the tests read them here.
"""

import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STACK = REPO / "dev" / "stack"
CLUSTER_NEXT = REPO / "dev" / "cluster-next"
DEV_CLUSTER = "portal-dev"
NEXT_CLUSTER = "portal-next"


def script_env(script: Path) -> dict[str, str]:
    """The variables ``<script> env`` prints, as a shell reads them (values may be quoted)."""
    output = subprocess.run(
        [str(script), "env"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assignments = (shlex.split(line)[0] for line in output.splitlines() if line.strip())
    return dict(assignment.split("=", 1) for assignment in assignments)


def is_running(script: Path) -> bool:
    """``<script> status``: every daemon up (it needs root; anyone else is told no)."""
    try:
        status = subprocess.run(
            [str(script), "status"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return status.returncode == 0
