"""What a job costs in GPU-seconds: requested (held before it runs) and used (charged
after), at the partition's billing weight and CPU-hour rate (DESIGN "GPU-hours")."""

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext


def cpus_per_task(*, nodes: int, gpus_per_node: int, cpus_per_gpu: int | None) -> int:
    """CPUs Slurm gives one job (or one array task) of this request: ``cpus_per_gpu`` for
    each GPU, else its default of one task of one CPU on each node."""
    if cpus_per_gpu and gpus_per_node:
        return nodes * gpus_per_node * cpus_per_gpu
    return nodes


@dataclass(frozen=True)
class Price:
    """What a job costs, in GPU-seconds: its GPUs at the partition's billing weight plus its
    CPUs at the partition's CPU-hour rate (issue 16: no job is free), rounded up once."""

    gpu_seconds: int  # raw GPU-seconds (GPUs x seconds), before the weight
    cpu_seconds: int  # raw CPU-seconds (CPUs x seconds), before the rate
    billing_weight: Decimal
    cpu_hour_rate: Decimal

    @property
    def gpu_part(self) -> Decimal:
        return Decimal(self.gpu_seconds) * self.billing_weight

    @property
    def cpu_part(self) -> Decimal:
        return Decimal(self.cpu_seconds) * self.cpu_hour_rate

    @property
    def total(self) -> int:
        """The GPU-seconds held or charged."""
        factors = (self.gpu_seconds, self.cpu_seconds, self.billing_weight, self.cpu_hour_rate)
        if any(factor < 0 for factor in factors):
            raise ValueError("seconds, billing weights and CPU-hour rates cannot be negative")
        # Enough precision that the sum is exact before the one rounding.
        with localcontext(prec=60):
            return int((self.gpu_part + self.cpu_part).to_integral_value(ROUND_CEILING))


def requested_price(
    *,
    nodes: int,
    gpus_per_node: int,
    cpus: int,
    time_limit_minutes: int,
    array_tasks: int,
    billing_weight: Decimal,
    cpu_hour_rate: Decimal,
) -> Price:
    """What a job requests (DESIGN "GPU-hours"): every task for its whole time limit."""
    seconds = time_limit_minutes * 60 * array_tasks
    return Price(
        gpu_seconds=nodes * gpus_per_node * seconds,
        cpu_seconds=cpus * seconds,
        billing_weight=billing_weight,
        cpu_hour_rate=cpu_hour_rate,
    )


def charge_gpu_seconds(
    *,
    allocated_gpus: int,
    allocated_cpus: int,
    elapsed_s: int,
    billing_weight: Decimal,
    cpu_hour_rate: Decimal,
) -> int:
    """GPU-seconds a finished job used: allocated GPUs and CPUs (``AllocTRES``) for the
    elapsed seconds, at the same prices as its request, rounded up."""
    return Price(
        gpu_seconds=allocated_gpus * elapsed_s,
        cpu_seconds=allocated_cpus * elapsed_s,
        billing_weight=billing_weight,
        cpu_hour_rate=cpu_hour_rate,
    ).total
