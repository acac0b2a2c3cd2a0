"""A researcher's own preferences: which of their jobs' ends they are mailed about
(jobs.job_mail) and the language of those mails."""

from django.conf import settings

from accounts.models import User


def mail_language_choices() -> list[tuple[str, str]]:
    """The languages a mail can be written in ("": the portal's default)."""
    return [(code, str(name)) for code, name in settings.LANGUAGES]


def preferences_update(
    *, user: User, job_mail: str | None = None, mail_language: str | None = None
) -> User:
    """Save the preferences given (validated by the caller's form or serializer)."""
    changed = []
    if job_mail is not None and job_mail != user.job_mail:
        user.job_mail = job_mail
        changed.append("job_mail")
    if mail_language is not None and mail_language != user.mail_language:
        user.mail_language = mail_language
        changed.append("mail_language")
    if changed:
        user.save(update_fields=changed)
    return user
