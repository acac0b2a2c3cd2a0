"""Slurm's own job states, normalised from the text its tools and REST API print.

The portal's job states and the mapping to them live in ``jobs/states.py``;
this module only knows Slurm.
"""

import functools
from enum import StrEnum


class SlurmJobState(StrEnum):
    BOOT_FAIL = "BOOT_FAIL"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    DEADLINE = "DEADLINE"
    FAILED = "FAILED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PENDING = "PENDING"
    PREEMPTED = "PREEMPTED"
    REQUEUED = "REQUEUED"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESIZING = "RESIZING"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    REVOKED = "REVOKED"
    RUNNING = "RUNNING"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    SUSPENDED = "SUSPENDED"
    TIMEOUT = "TIMEOUT"


# squeue's and sacct's compact codes (``%t``) and old spellings.
_ALIASES = {
    "BF": "BOOT_FAIL",
    "CA": "CANCELLED",
    "CD": "COMPLETED",
    "CG": "COMPLETING",
    "CF": "CONFIGURING",
    "DL": "DEADLINE",
    "F": "FAILED",
    "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY",
    "PD": "PENDING",
    "PR": "PREEMPTED",
    "R": "RUNNING",
    "RD": "RESV_DEL_HOLD",
    "RF": "REQUEUE_FED",
    "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
    "RV": "REVOKED",
    "SI": "SIGNALING",
    "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT",
    "ST": "STOPPED",
    "S": "SUSPENDED",
    "TO": "TIMEOUT",
}


# How a job that never started can end, in the codes sacct's --state takes. A read of a
# time window without --state (sacct's or slurmdbd's REST) leaves out a job that never
# became eligible — one cancelled while it waited on a dependency, a hold or a begin
# time — so accounting reads these states a second time for such jobs. Not every state
# named in one read instead: 22.05 refuses some (CF, CG: "not supported / accounted"),
# and a read naming states sometimes gives a job that just ended with no partition.
UNSTARTED_END_STATES = ("CA", "DL")


@functools.lru_cache(maxsize=256)
def normalise_state(text: str) -> SlurmJobState:
    """``CANCELLED by 1000``, ``cancelled``, ``CA`` and ``["CANCELLED"]``-style names alike.

    Raises ValueError for a state Slurm does not have, so a new one in a
    future Slurm is noticed instead of being mistaken for another.
    """
    word = text.strip().split(" ", 1)[0].rstrip("+").upper()
    return SlurmJobState(_ALIASES.get(word, word))
