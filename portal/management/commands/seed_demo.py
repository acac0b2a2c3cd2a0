from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from clusters.slurm import SlurmError
from portal.demo import seed_demo


class Command(BaseCommand):
    help = (
        "Create demo POSIX and portal users, two projects with allocations and the dev "
        "cluster with its partitions, and the same on portal-next when dev/cluster-next "
        "runs it. Safe to re-run: only what is missing is created."
    )

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default="portal-dev", help="Slurm ClusterName.")
        parser.add_argument(
            "--reset-passwords",
            action="store_true",
            help="Give the demo users new passwords and print them.",
        )

    def handle(self, *args, cluster, reset_passwords, **options):
        try:
            logins, changes = seed_demo(cluster_name=cluster, reset_passwords=reset_passwords)
        except SlurmError as exc:
            raise CommandError(
                f"Slurm did not answer: {exc}. Start the dev stack first: dev/stack start"
            ) from exc
        for change in changes:
            self.stdout.write(f"  {change}")
        self.stdout.write("Demo logins:")
        for login in logins:
            password = login.password or "(unchanged; --reset-passwords prints a new one)"
            self.stdout.write(f"  {login.username:<6} {password:<14}  {login.what}")
        secrets_dir = settings.STACK_DIR / "secrets"
        if settings.LDAP_URL:
            self.stdout.write(
                f"Or with the directory's passwords ({settings.LDAP_URL}): alice, bob, pat, "
                f"olga; as root: cat {secrets_dir}/ldap-user-alice"
            )
        if settings.OIDC_ISSUER:
            self.stdout.write(
                f'Or "Log in with {settings.OIDC_NAME}" ({settings.OIDC_ISSUER}) as '
                f"alice.anders, bob.brandt, pat.park, olga.ortiz; as root: "
                f"cat {secrets_dir}/oidc-user-alice.anders"
            )
