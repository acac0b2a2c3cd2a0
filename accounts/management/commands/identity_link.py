from django.core.management.base import BaseCommand, CommandError

from accounts.errors import NotAllowed, Refused
from accounts.identity import identity_link
from accounts.models import ExternalIdentity, User


class Command(BaseCommand):
    help = (
        "Link a sign-in (the directory's entry or the provider's subject) to an account a "
        "sign-in never takes by itself: staff, superusers, allocation managers, or one "
        "another identity of that source signs in to. The refusal in the portal's log names "
        "the subject. Audited under the manager given with --by."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="The portal account to link the sign-in to.")
        parser.add_argument(
            "--source", required=True, choices=[s.value for s in ExternalIdentity.Source]
        )
        parser.add_argument(
            "--subject",
            required=True,
            help="The provider's sub, or the directory entry's DN.",
        )
        parser.add_argument(
            "--issuer", default="", help="Default: the configured provider's or directory's."
        )
        parser.add_argument("--login", default="", help="The name they sign in with there.")
        parser.add_argument(
            "--by", required=True, help="The allocation manager (or superuser) linking it."
        )

    def handle(self, *args, username, source, subject, issuer, login, by, **options):
        user, actor = _account(username), _account(by)
        try:
            identity = identity_link(
                actor=actor, user=user, source=source, subject=subject, issuer=issuer, login=login
            )
        except (NotAllowed, Refused) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"{identity.source} {identity.subject!r} at {identity.issuer} signs in as {user}"
        )


def _account(username: str) -> User:
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise CommandError(f"No portal account is named {username!r}.") from None
