"""The exit codes scripts can rely on; the help's epilog and the README list them too."""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    JOB_FAILED = 1  # logs --follow / show --wait: the job ended other than completed
    USAGE = 2  # argparse's own code: a bad option, a bad job file
    NOT_LOGGED_IN = 3  # no token, or the portal refused it (401)
    NOT_FOUND = 4  # 404: no such job (or not one of yours), no output yet
    REFUSED = 5  # 400 invalid, 403, 409 (quota_exceeded, …) and other 4xx
    UNAVAILABLE = 6  # no answer, a 5xx (503: Slurm does not answer)
    RATE_LIMITED = 7  # 429, still after waiting as told


EPILOG = """\
exit codes:
  0  ok
  1  the job ended other than completed (logs --follow, show --wait)
  2  usage error: a bad option or job file
  3  not logged in, or the token was refused (401): run `sgp login`
  4  not found (404): no such job of yours, or no output yet
  5  refused (400 invalid input, 403, 409 e.g. quota_exceeded with both numbers)
  6  the portal or Slurm is unavailable (no connection, 503, other 5xx)
  7  rate limited (429)

environment: SGP_URL and SGP_TOKEN override the stored login; SGP_CONFIG names
another config file than ~/.config/sgp/config.json."""


def exit_for_status(status: int) -> Exit:
    """The exit code of an HTTP status the portal refused a request with."""
    if status == 401:
        return Exit.NOT_LOGGED_IN
    if status == 404:
        return Exit.NOT_FOUND
    if status == 429:
        return Exit.RATE_LIMITED
    if status >= 500:
        return Exit.UNAVAILABLE
    if 300 <= status < 400:
        # A redirect means the stored URL is not the API's (http -> https, a moved
        # portal): following it would resend a POST as GET, so log in again instead.
        return Exit.NOT_LOGGED_IN
    return Exit.REFUSED
