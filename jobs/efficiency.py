"""How well an ended job used what it asked for, from its accounting records.

Pure reads of what the accounting ingest stored (``AccountingRecord``'s usage fields):
CPU efficiency, memory peak against the allocation, time used against the limit, GPU
utilisation where the cluster records it. An array is summed over its tasks.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from jobs.models import AccountingRecord, Job

# A job "asked for far more" than it used when it used under a quarter of it: below
# that, a limit or request half as big would still have fitted twice over, so the
# advice cannot cut a job that merely varies from run to run.
FAR_MORE_RATIO = 0.25
# ... and the excess matters: backfill fits a job into a gap by its limit, and a limit
# 30 minutes shorter is a gap of a different size on a busy cluster; memory left idle
# below 4 GiB is noise next to a GPU node's hundreds of GiB.
TIME_EXCESS_MIN_S = 30 * 60
MEMORY_EXCESS_MIN_BYTES = 4 * 2**30


@dataclass(frozen=True)
class Efficiency:
    tasks: int  # records summed (array tasks that ran)
    elapsed_s: int  # the longest task's run
    time_limit_s: int | None
    cpu_time_s: float | None  # TotalCPU, all tasks
    cpu_allocated_s: int  # elapsed x CPUs, all tasks
    mem_peak_bytes: int | None  # the highest task's peak
    mem_allocated_bytes: int | None  # what that task (any task: the same) was given
    gpu_util_percent: float | None  # None: not recorded by this cluster
    gpu_mem_peak_bytes: int | None
    gpu_seconds: int  # GPUs x elapsed, all tasks
    requested_gpu_hours: float  # what the portal held for the job while it waited and ran

    @property
    def cpu_percent(self) -> float | None:
        if self.cpu_time_s is None or not self.cpu_allocated_s:
            return None
        return 100 * self.cpu_time_s / self.cpu_allocated_s

    @property
    def mem_percent(self) -> float | None:
        if self.mem_peak_bytes is None or not self.mem_allocated_bytes:
            return None
        return 100 * self.mem_peak_bytes / self.mem_allocated_bytes

    @property
    def time_percent(self) -> float | None:
        if not self.time_limit_s:
            return None
        return 100 * self.elapsed_s / self.time_limit_s

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600

    @property
    def asked_far_more_time(self) -> bool:
        return (
            self.time_limit_s is not None
            and self.elapsed_s < FAR_MORE_RATIO * self.time_limit_s
            and self.time_limit_s - self.elapsed_s >= TIME_EXCESS_MIN_S
        )

    @property
    def asked_far_more_memory(self) -> bool:
        return (
            self.mem_peak_bytes is not None
            and self.mem_allocated_bytes is not None
            and self.mem_peak_bytes < FAR_MORE_RATIO * self.mem_allocated_bytes
            and self.mem_allocated_bytes - self.mem_peak_bytes >= MEMORY_EXCESS_MIN_BYTES
        )


def efficiency_of(job: Job, records: Iterable[AccountingRecord]) -> Efficiency | None:
    """The job's efficiency once it ended and accounting charged it; None before, and
    for a job that never ran."""
    if not job.is_finished or job.used_gpu_seconds is None:
        return None
    ran = [r for r in records if r.elapsed_s > 0 or r.cpu_time_s is not None]
    if not ran:
        return None
    cpu_times = [r.cpu_time_s for r in ran if r.cpu_time_s is not None]
    peak = max(
        (r for r in ran if r.mem_peak_bytes is not None),
        key=lambda r: r.mem_peak_bytes or 0,
        default=None,
    )
    gpu_weighted = [
        (r.gpu_util_percent, r.allocated_gpus * r.elapsed_s)
        for r in ran
        if r.gpu_util_percent is not None
    ]
    weight = sum(w for _, w in gpu_weighted)
    gpu_mems = [r.gpu_mem_peak_bytes for r in ran if r.gpu_mem_peak_bytes is not None]
    limits = [r.time_limit_minutes for r in ran if r.time_limit_minutes is not None]
    return Efficiency(
        tasks=len(ran),
        elapsed_s=max(r.elapsed_s for r in ran),
        time_limit_s=max(limits) * 60 if limits else None,
        cpu_time_s=sum(cpu_times) if cpu_times else None,
        cpu_allocated_s=sum(r.elapsed_s * r.allocated_cpus for r in ran),
        mem_peak_bytes=peak.mem_peak_bytes if peak else None,
        mem_allocated_bytes=(
            peak.mem_allocated_bytes
            if peak
            else max((r.mem_allocated_bytes or 0 for r in ran), default=0) or None
        ),
        gpu_util_percent=(
            sum(u * w for u, w in gpu_weighted) / weight
            if weight
            else (sum(u for u, _ in gpu_weighted) / len(gpu_weighted) if gpu_weighted else None)
        ),
        gpu_mem_peak_bytes=max(gpu_mems) if gpu_mems else None,
        gpu_seconds=sum(r.allocated_gpus * r.elapsed_s for r in ran),
        requested_gpu_hours=job.requested_gpu_hours,
    )


def job_efficiency(job: Job) -> Efficiency | None:
    """``efficiency_of`` the job's records (prefetched by ``selectors.job_detail``)."""
    if not job.is_finished or job.used_gpu_seconds is None:
        return None  # no query for a job that cannot have one yet
    return efficiency_of(job, job.accounting.all())
