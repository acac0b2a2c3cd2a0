from django.core.management.base import BaseCommand, CommandError

from accounts.adoption import account_adopt, account_listing_refresh
from accounts.errors import Refused
from accounts.models import AdoptedAccount, Project, User
from clusters.models import Cluster
from clusters.slurm.types import PORTAL_ORGANIZATION


def limits_text(limits: dict) -> str:
    shown = {
        "GrpTRESMins gres/gpu": limits.get("gpu_minutes"),
        "GrpTRESMins cpu": limits.get("cpu_minutes"),
        "MaxSubmitJobs": limits.get("max_submit_jobs"),
        "GrpSubmitJobs": limits.get("GrpSubmitJobs"),
        "GrpJobs": limits.get("GrpJobs"),
    }
    return ", ".join(f"{name}={value}" for name, value in shown.items() if value is not None)


class Command(BaseCommand):
    help = (
        "List the Slurm accounts and associations a cluster already has and, for each made "
        "by hand, what adopting it would change (a dry run: the listing changes nothing in "
        "Slurm and is kept for the console's Slurm import page). With --adopt, hand one to "
        "the portal, bound to the project of its name (--project) or to a new one "
        "(--new-project); the reconciler then manages it on that cluster."
    )

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="The cluster's Slurm ClusterName.")
        parser.add_argument("--adopt", metavar="ACCOUNT", help="Adopt this Slurm account.")
        parser.add_argument("--project", metavar="SLUG", help="…into this existing project.")
        parser.add_argument("--new-project", metavar="SLUG", help="…into a new project.")
        parser.add_argument("--name", default="", help="The new project's name.")
        parser.add_argument("--pi", metavar="USERNAME", help="The new project's PI.")
        parser.add_argument(
            "--remove-other-users",
            action="store_true",
            help="Let the reconciler remove the associations of users who are not the "
            "project's members (by default they are kept).",
        )
        parser.add_argument("--by", metavar="USERNAME", help="Who adopts, for the audit log.")
        parser.add_argument(
            "--dry-run", action="store_true", help="With --adopt: list, say what it would do."
        )

    def handle(self, *args, **options):
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"No cluster is named {options['cluster']!r}.")
        listing = account_listing_refresh(cluster=cluster)
        if listing.error:
            raise CommandError(
                f"Slurm did not list the accounts of {cluster.name}: {listing.error}"
            )
        adopted = {
            a.account: a
            for a in AdoptedAccount.objects.filter(cluster=cluster).select_related("project")
        }
        account = options["adopt"]
        rows = [row for row in listing.accounts if account in (None, row["name"])]
        if account and not rows:
            raise CommandError(f"{cluster.name} has no account {account!r} (root aside).")
        for row in rows:
            self._show(row, adopted.get(row["name"]))
        if not account or options["dry_run"]:
            if not account:
                self.stdout.write("Dry run: nothing was changed. Adopt one with --adopt.")
            return
        try:
            adoption = account_adopt(
                cluster=cluster,
                account=account,
                actor=self._user(options["by"]),
                project=self._project(options["project"]),
                new_project_slug=options["new_project"] or "",
                new_project_name=options["name"],
                pi=self._user(options["pi"]),
                remove_other_users=options["remove_other_users"],
            )
        except Refused as refused:
            raise CommandError(str(refused)) from refused
        self.stdout.write(
            f"Adopted {account} on {cluster.name} into project {adoption.project.slug}; the "
            "next reconcile run manages it."
        )

    def _show(self, row: dict, adoption: AdoptedAccount | None) -> None:
        self.stdout.write(
            f"{row['name']} (organization {row['organization'] or '-'}, parent "
            f"{row['parent'] or '-'}): {row['description']}"
        )
        self.stdout.write(f"  users: {', '.join(row['users']) or '-'}")
        self.stdout.write(f"  limits: {limits_text(row['limits']) or '-'}")
        if row["organization"] == PORTAL_ORGANIZATION:
            self.stdout.write("  the portal's own")
        elif adoption is not None:
            self.stdout.write(f"  adopted into project {adoption.project.slug}")
        elif row["problem"]:
            self.stdout.write(f"  cannot be adopted: {row['problem']}")
        elif row["project"]:
            self.stdout.write(f"  adopting it into project {row['project']} would:")
            for change in row["changes"] or ["change nothing"]:
                self.stdout.write(f"    {change}")
            for user in row["others"]:
                self.stdout.write(
                    f"    keep {user} (not a member; removed only with --remove-other-users)"
                )
        else:
            self.stdout.write("  made by hand; no project has its name: adopt with --new-project")

    @staticmethod
    def _user(username: str | None) -> User | None:
        if not username:
            return None
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user is named {username!r}.")
        return user

    @staticmethod
    def _project(slug: str | None) -> Project | None:
        if not slug:
            return None
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise CommandError(f"No project has the slug {slug!r}.")
        return project
