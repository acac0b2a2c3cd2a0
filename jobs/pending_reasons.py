"""Why a job pends, in words: Slurm's reason → a plain sentence and what the researcher
can do, in the active language.

Slurm names its reasons in ``enum job_state_reason`` (``dev/slurm-reasons`` prints each
installed version's list; tests/jobs/test_pending_reasons.py holds this module complete
against them). Most are limits spelt by pattern — who set it (the association: the
project; or the QOS), which kind (Grp: all jobs together; Max: one job, one user, one
project; Min), on what (CPU, Mem, GRES…) and how (Minutes, RunMinutes, PerJob…) — so
the limits are read by pattern, the rest by name. squeue may give a description
instead of the name (``ReqNodeNotAvail, UnavailableNodes:vm``): its leading name counts.
A reason this module does not know is shown as Slurm gives it.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from jobs.states import JobState


class Family:
    """What kind of wait it is; pages and the API may act on it (a link, an icon)."""

    QUEUED = "queued"
    PRIORITY = "priority"
    RESOURCES = "resources"
    DEPENDENCY = "dependency"
    HELD = "held"
    BEGIN_TIME = "begin_time"
    PARTITION = "partition"
    NODES = "nodes"
    RESERVATION = "reservation"
    LICENSES = "licenses"
    GPU_HOURS = "gpu_hours"  # the project's GPU-hours, which the portal keeps in Slurm
    LIMIT = "limit"
    ACCOUNT = "account"
    REQUEST = "request"  # the job asks for what cannot be given: it will not start as it is
    REQUEUED = "requeued"  # it ran, ended, and waits to run again
    SCHEDULER = "scheduler"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Explanation:
    code: str  # Slurm's reason name ("ReqNodeNotAvail"), or the raw text if it has none
    family: str
    sentence: str
    advice: str  # "" when there is nothing to do but wait


# A reason's name leads whatever squeue prints: "Name", "Name, detail", "Name (detail)".
_NAME = re.compile(r"([A-Za-z]+)(?:$|[,:(\s])")

_LIMIT = re.compile(
    r"(?P<owner>Assoc|QOS)(?P<kind>Grp|Max|Min)"
    r"(?P<resource>Cpu|CPU|Memory|Mem|Node|GRES|Energy|License|BB|Billing|Unknown"
    r"|SubmitJobs|SubmitJob|Jobs|WallDuration|Wall)"
    r"(?P<scope>RunMinutes|MinutesPerJob|Minutes|PerJob|PerNode|PerUser|NotSatisfied)?"
    r"(?:Limit)?"
)
# The QOS's limits on one project's or one user's jobs together (MaxTRESPerAccount,
# MaxTRESRunMinsPerAccount, MaxTRESRunMinsPerUser).
_QOS_PER = re.compile(
    r"Max(?P<resource>BB|Billing|Cpu|Energy|GRES|Node|License|Memory|Unknown|SubmitJobs|Jobs)"
    r"(?P<scope>PerAccount|RunMinsPerAccount|RunMinsPerUser)"
)


def _resource(name: str) -> str:
    names = {
        "cpu": _("CPUs"),
        "memory": _("memory"),
        "mem": _("memory"),
        "node": _("nodes"),
        "gres": _("GPUs"),
        "energy": _("energy"),
        "license": _("licences"),
        "bb": _("burst buffer"),
        "billing": _("billing units"),
        "wall": _("run time"),
        "wallduration": _("run time"),
    }
    return names.get(name.lower(), _("a resource"))


def _ask_lead() -> str:
    return _("Ask your project's PI, who can ask the allocation managers to raise it.")


def _smaller() -> str:
    return _("It will not start as it is: cancel it and submit it again asking for less.")


def _limit(owner: str, kind: str, resource: str, scope: str) -> tuple[str, str, str]:
    """(family, sentence, advice) of one of Slurm's limit reasons."""
    if owner == "Assoc" and kind == "Grp" and resource == "GRES" and scope == "Minutes":
        return (
            Family.GPU_HOURS,
            _("Your project has used its GPU-hours on this cluster."),
            _("Ask your PI for more: a new allocation lets it start."),
        )
    if owner == "Assoc" and kind == "Grp" and resource == "GRES" and scope == "RunMinutes":
        return (
            Family.GPU_HOURS,
            _("Your project's running jobs and this one would pass its GPU-hour limit."),
            _("It may start when running jobs end; ask your PI for more GPU-hours."),
        )
    whose = _("your project") if owner == "Assoc" else _("its quality of service (QOS)")
    values = {"owner": whose, "resource": _resource(resource)}
    family, sentence, advice = Family.LIMIT, "", _("It starts when some of them end.")
    if kind == "Min":
        family = Family.REQUEST
        sentence = _("It asks for fewer %(resource)s than %(owner)s requires.")
        advice = _("Cancel it and submit it again asking for more.")
    elif resource == "Jobs":
        if kind == "Grp":
            sentence = _("%(owner)s has as many running jobs as its limit allows.")
        else:
            sentence = _("You have as many running jobs as %(owner)s allows.")
    elif resource.startswith("SubmitJob"):
        if kind == "Grp":
            sentence = _("%(owner)s has as many jobs running or queued as its limit allows.")
        else:
            sentence = _("You have as many jobs running or queued as %(owner)s allows.")
    elif resource.startswith("Wall") and kind == "Grp":
        sentence = _("%(owner)s has used all the run time its limit allows.")
        advice = _ask_lead()
    elif resource.startswith("Wall"):
        family = Family.REQUEST
        sentence = _("Its time limit is longer than %(owner)s allows one job.")
        advice = _("Cancel it and submit it again with a shorter time limit.")
    elif kind == "Grp" and scope == "Minutes":
        sentence = _("%(owner)s has used all the time on %(resource)s its limit allows.")
        advice = _ask_lead()
    elif kind == "Grp" and scope == "RunMinutes":
        sentence = _(
            "The running jobs of %(owner)s have all the time on %(resource)s left that its "
            "limit allows."
        )
    elif kind == "Grp":
        sentence = _("The running jobs of %(owner)s together use all the %(resource)s it allows.")
    elif scope == "PerUser":
        sentence = _("Your running jobs together use all the %(resource)s %(owner)s allows you.")
        advice = _("It starts when some of your jobs end.")
    else:
        family, advice = Family.REQUEST, _smaller()
        if scope == "PerNode":
            sentence = _("It asks for more %(resource)s on one node than %(owner)s allows.")
        elif scope == "MinutesPerJob":
            sentence = _("It asks for more time on %(resource)s than %(owner)s allows one job.")
        else:
            sentence = _("It asks for more %(resource)s than %(owner)s allows one job.")
    return family, capfirst(sentence % values), advice


def _qos_per(resource: str, scope: str) -> tuple[str, str, str]:
    values = {"resource": _resource(resource)}
    if scope == "PerAccount":
        sentence = _("Your project's jobs together use all the %(resource)s its QOS allows it.")
    elif scope == "RunMinsPerAccount":
        sentence = _(
            "Your project's running jobs have all the time on %(resource)s left that its QOS "
            "allows."
        )
    else:
        sentence = _(
            "Your running jobs have all the time on %(resource)s left that the QOS allows you."
        )
    return Family.LIMIT, sentence % values, _("It starts as running jobs end.")


def _resources(gpus: int | None) -> tuple[str, str, str]:
    if gpus:
        sentence = ngettext(
            "It waits for %(count)d GPU to free up on nodes it can use.",
            "It waits for %(count)d GPUs to free up on nodes it can use.",
            gpus,
        ) % {"count": gpus}
    else:
        sentence = _("It waits for the resources it asked for to free up.")
    return (
        Family.RESOURCES,
        sentence,
        _("It starts when running jobs end; a shorter time limit can let it start sooner."),
    )


_Text = Callable[[], tuple[str, str, str]]


# Sentences several reasons share; translated when asked for, as the table's are.
def _partition_closed() -> tuple[str, str, str]:
    return (
        Family.PARTITION,
        _("Its partition is closed for now and starts no job."),
        _("It starts when the partition reopens; or cancel it and submit it to another partition."),
    )


def _nodes_back() -> str:
    return _("It starts when they are back; the cluster's status page shows which are down.")


def _look_at_output() -> str:
    return _("Look at its output; cancel it if it should not run again.")


def _ask_admins() -> str:
    return _("Ask the cluster's administrators why.")


def _ask_managers() -> str:
    return _("Ask the allocation managers: the portal keeps your project's Slurm account.")


def _until_some_end() -> str:
    return _("It starts when some of them end.")


def _no_node_has_it() -> tuple[str, str, str]:
    return (
        Family.REQUEST,
        _("No node has what it asks for (features, GPU type or size)."),
        _("Cancel it and submit it again with a request a node can meet."),
    )


def _unpowered() -> tuple[str, str, str]:
    return Family.NODES, _("Nodes it needs are not powered on yet."), ""


_BY_NAME: dict[str, _Text] = {
    "None": lambda: (Family.QUEUED, _("Slurm has not looked at it yet; it will in a moment."), ""),
    "Priority": lambda: (
        Family.PRIORITY,
        _("Jobs with a higher priority wait ahead of it in its partition."),
        _("It starts after them; a shorter time limit can let it start sooner, in a gap."),
    ),
    "Dependency": lambda: (
        Family.DEPENDENCY,
        _("It waits for the jobs it depends on."),
        _("It starts when they have ended as it requires."),
    ),
    "DependencyNeverSatisfied": lambda: (
        Family.DEPENDENCY,
        _("A job it depends on ended in a way that means this one can never start."),
        _("Cancel it, and submit it again once the job it needs has run as required."),
    ),
    "JobHeldUser": lambda: (
        Family.HELD,
        _("It is held by its owner or project lead."),
        _("Release it to let it run, or cancel it."),
    ),
    "JobHeldAdmin": lambda: (Family.HELD, _("An administrator holds it."), _ask_admins()),
    "BeginTime": lambda: (
        Family.BEGIN_TIME,
        _("It was asked not to start before a set time, which has not come."),
        "",
    ),
    "PartitionDown": _partition_closed,
    "PartitionInactive": _partition_closed,
    "PartitionNodeLimit": lambda: (
        Family.PARTITION,
        _("It asks for more nodes than its partition allows, or nodes it needs are down."),
        _("Cancel it and submit it again with fewer nodes, or to another partition."),
    ),
    "PartitionTimeLimit": lambda: (
        Family.REQUEST,
        _("Its time limit is longer than its partition allows."),
        _("Cancel it and submit it again with a shorter time limit."),
    ),
    "PartitionConfig": lambda: (
        Family.REQUEST,
        _("It asks for more than its partition has or allows."),
        _("Cancel it and submit it again asking for less, or to another partition."),
    ),
    "ReqNodeNotAvail": lambda: (
        Family.NODES,
        _("Nodes it could run on are down, drained or reserved, and the others are busy."),
        _nodes_back(),
    ),
    "NodeDown": lambda: (Family.NODES, _("A node it needs is down."), _nodes_back()),
    "FrontEndDown": lambda: (Family.NODES, _("No front-end node is up to run it."), _nodes_back()),
    "PowerNotAvail": _unpowered,
    "PowerReserved": _unpowered,
    "MaxPoweredUpNodes": lambda: (
        Family.NODES,
        _("The cluster may not power up more nodes for now."),
        _nodes_back(),
    ),
    "BadConstraints": _no_node_has_it,
    "Constraints": _no_node_has_it,
    "Reservation": lambda: (Family.RESERVATION, _("It waits for its reservation to begin."), ""),
    "ReservationDeleted": lambda: (
        Family.RESERVATION,
        _("Its reservation was deleted."),
        _("Cancel it and submit it again without the reservation."),
    ),
    "ReservationInvalid": lambda: (
        Family.RESERVATION,
        _("Its reservation is no longer valid."),
        _("Cancel it and submit it again without the reservation."),
    ),
    "Licenses": lambda: (Family.LICENSES, _("It waits for a software licence to free up."), ""),
    "InvalidAccount": lambda: (
        Family.ACCOUNT,
        _("Slurm does not know its project's account."),
        _ask_managers(),
    ),
    "InvalidQOS": lambda: (
        Family.ACCOUNT,
        _("Slurm does not know the QOS it asked for."),
        _ask_managers(),
    ),
    "AccountNotAllowed": lambda: (
        Family.ACCOUNT,
        _("Its project's account may not use its partition."),
        _("Cancel it and submit it to a partition the project may use."),
    ),
    "QOSNotAllowed": lambda: (
        Family.ACCOUNT,
        _("Its QOS may not be used in its partition or by its project."),
        _ask_managers(),
    ),
    "AssociationJobLimit": lambda: (
        Family.LIMIT,
        _("Your project has as many jobs as its limit allows."),
        _until_some_end(),
    ),
    "AssociationResourceLimit": lambda: (
        Family.LIMIT,
        _("Your project's jobs use all of a resource its limit allows."),
        _until_some_end(),
    ),
    "AssociationTimeLimit": lambda: (
        Family.LIMIT,
        _("Your project has reached a time limit of its own."),
        _ask_lead(),
    ),
    "QOSJobLimit": lambda: (
        Family.LIMIT,
        _("Its QOS has as many jobs as its limit allows."),
        _until_some_end(),
    ),
    "QOSResourceLimit": lambda: (
        Family.LIMIT,
        _("The jobs of its QOS use all of a resource its limit allows."),
        _until_some_end(),
    ),
    "QOSTimeLimit": lambda: (Family.LIMIT, _("Its QOS has reached a time limit."), _ask_lead()),
    "QOSUsageThreshold": lambda: (
        Family.LIMIT,
        _("Its QOS has used what its usage threshold allows."),
        _ask_lead(),
    ),
    "MaxMemPerLimit": lambda: (
        Family.REQUEST,
        _("It asks for more memory per CPU or node than the cluster allows."),
        _("Cancel it and submit it again with less memory per GPU."),
    ),
    "AccountingPolicy": lambda: (
        Family.LIMIT,
        _("A limit of the cluster's accounting policy holds it back."),
        _("It starts when running jobs end."),
    ),
    "JobArrayTaskLimit": lambda: (
        Family.LIMIT,
        _("Its array runs as many tasks at once as its spec allows (after its percent sign)."),
        _("The next tasks start as running ones end."),
    ),
    "SchedDefer": lambda: (
        Family.SCHEDULER,
        _("Slurm looks at new jobs in its next scheduling pass."),
        "",
    ),
    "FedJobLock": lambda: (
        Family.SCHEDULER,
        _("Another cluster of the federation is deciding where it runs."),
        "",
    ),
    "MpiPortsBusy": lambda: (Family.SCHEDULER, _("It waits for MPI ports to free up."), ""),
    "BurstBufferResources": lambda: (Family.SCHEDULER, _("It waits for burst buffer space."), ""),
    "BurstBufferStageIn": lambda: (
        Family.SCHEDULER,
        _("Its files are being staged into the burst buffer."),
        "",
    ),
    "BurstBufferOperation": lambda: (
        Family.SCHEDULER,
        _("A burst buffer operation for it failed."),
        _ask_admins(),
    ),
    "BlockMaxError": lambda: (Family.SCHEDULER, _("Too many errors on the block it needs."), ""),
    "BlockFreeAction": lambda: (Family.SCHEDULER, _("The block it needs is being freed."), ""),
    "Cleaning": lambda: (
        Family.REQUEUED,
        _("It was requeued and its previous run is still being cleaned up."),
        "",
    ),
    "Prolog": lambda: (Family.SCHEDULER, _("The cluster's prolog runs before it starts."), ""),
    "JobLaunchFailure": lambda: (
        Family.REQUEUED,
        _("It could not be launched on its node and was put back in the queue, held."),
        _ask_admins(),
    ),
    "SystemFailure": lambda: (
        Family.REQUEUED,
        _("A failure of Slurm or the system stopped it."),
        _ask_admins(),
    ),
    "JobHoldMaxRequeue": lambda: (
        Family.REQUEUED,
        _("It was requeued too many times and is held."),
        _("Look at its output, then release or cancel it."),
    ),
    "NonZeroExitCode": lambda: (
        Family.REQUEUED,
        _("Its last run ended with a non-zero exit code."),
        _look_at_output(),
    ),
    "RaisedSignal": lambda: (
        Family.REQUEUED,
        _("Its last run was ended by a signal."),
        _look_at_output(),
    ),
    "TimeLimit": lambda: (
        Family.REQUEUED,
        _("Its last run reached its time limit."),
        _look_at_output(),
    ),
    "InactiveLimit": lambda: (
        Family.REQUEUED,
        _("Its last run was inactive for too long."),
        _look_at_output(),
    ),
    "OutOfMemory": lambda: (
        Family.REQUEUED,
        _("Its last run ran out of memory."),
        _look_at_output(),
    ),
    "DeadLine": lambda: (
        Family.REQUEST,
        _("It can no longer end before its deadline."),
        _("Cancel it and submit it again with a later deadline or a shorter time limit."),
    ),
}


def explain_pending_reason(reason: str, *, gpus: int | None = None) -> Explanation:
    """Slurm's reason for a pending job in words. ``gpus``: how many the job asks for
    (nodes x GPUs per node), said when it waits for resources. Any text gives an answer;
    a reason not known here is shown as Slurm gives it."""
    text = reason.strip()
    if not text:
        text = "None"
    match = _NAME.match(text)
    name = match.group(1) if match else ""
    explained = _explained(name, gpus)
    if explained is None:
        return Explanation(
            code=text,
            family=Family.UNKNOWN,
            sentence=_("Slurm says: %(reason)s") % {"reason": text},
            advice="",
        )
    family, sentence, advice = explained
    return Explanation(code=name, family=family, sentence=sentence, advice=advice)


def _explained(name: str, gpus: int | None) -> tuple[str, str, str] | None:
    if not name:
        return None
    if name == "Resources":
        return _resources(gpus)
    if name in _BY_NAME:
        return _BY_NAME[name]()
    if limit := _LIMIT.fullmatch(name):
        return _limit(limit["owner"], limit["kind"], limit["resource"], limit["scope"] or "")
    if per := _QOS_PER.fullmatch(name):
        return _qos_per(per["resource"], per["scope"])
    return None


def is_explained(name: str) -> bool:
    """Whether ``name`` has an explanation of its own (not the "Slurm says" fallback)."""
    return explain_pending_reason(name).family != Family.UNKNOWN


def explain_job_wait(
    *, state: str, reason: str, nodes: int, gpus_per_node: int
) -> Explanation | None:
    """Why a job waits, for a pending one (the job page, the list, the API); None for a
    job in any other state."""
    if state != JobState.PENDING:
        return None
    return explain_pending_reason(reason, gpus=nodes * gpus_per_node)
