"""A project's fair-share standing, in words: why its pending jobs go before or after
others'.

Slurm's multifactor priority ranks an account's jobs by how its recent (decayed) usage
compares with its share of the cluster: an account that used less than its share goes
ahead of one that used more. The reconciler reads both numbers with the usage
(sshare's NormShares and EffectvUsage) and keeps them in its report; this module turns
them into a sentence for the project page. No Slurm command runs for a page.
"""

from dataclasses import dataclass

from django.utils.translation import gettext as _

from accounts.models import Project, ReconcileReport

# Usage over share: where the words change. Half or double the share is far from it.
WELL_BELOW, BELOW, ABOVE, WELL_ABOVE = 0.5, 0.9, 1.1, 2.0


@dataclass(frozen=True)
class Standing:
    cluster: str
    share: float  # the part of the cluster the account is entitled to, 0..1
    usage: float  # the part of the cluster's recent usage it had, 0..1
    words: str

    @property
    def share_percent(self) -> float:
        return 100 * self.share

    @property
    def usage_percent(self) -> float:
        return 100 * self.usage


def standing_words(*, share: float, usage: float) -> str:
    ratio = usage / share
    if ratio < WELL_BELOW:
        return _("well below its share: its jobs go ahead of most others'.")
    if ratio < BELOW:
        return _("below its share: its jobs tend to start before others'.")
    if ratio <= ABOVE:
        return _("about its share: its jobs wait their turn.")
    if ratio <= WELL_ABOVE:
        return _("above its share: others' jobs tend to start first.")
    return _("well above its share: most others' jobs start first until its usage decays.")


def project_standings(project: Project) -> list[Standing]:
    """The project's standing on each cluster whose last reconcile run read it."""
    standings = []
    reports = ReconcileReport.objects.select_related("cluster").order_by("cluster__name")
    for report in reports:
        found = (report.standings or {}).get(project.slurm_account)
        if not isinstance(found, dict):
            continue
        share, usage = found.get("share"), found.get("usage")
        if not isinstance(share, int | float) or not isinstance(usage, int | float) or share <= 0:
            continue
        standings.append(
            Standing(
                cluster=report.cluster.name,
                share=float(share),
                usage=float(usage),
                words=standing_words(share=float(share), usage=float(usage)),
            )
        )
    return standings
