"""Gunicorn's configuration for the portal's web tier (deploy/systemd/slurm-gpu-portal-web.service).

gunicorn runs it from the portal's directory with the unit's environment file, so the
values come from there, read by the portal's own typed helpers (a malformed value stops
gunicorn with a message naming the variable). nginx (deploy/nginx/slurm-gpu-portal.conf)
terminates TLS in front and sets the headers the settings trust.
"""

from portal.env import env_int, env_list
from portal.metric_files import metric_files_process_dead, metric_files_reset

# Where nginx reaches the web tier: a loopback port, or this host's private address when
# nginx runs elsewhere (README "Scale-out"). Comma-separated for several.
bind = env_list("PORTAL_WEB_BIND", ["127.0.0.1:8000"])
# Synchronous workers: a request that waits (an estimate's start, a job's output: a few
# seconds at most) holds one. Two to four per core.
workers = env_int("PORTAL_WEB_WORKERS", 4, minimum=1)
# A worker silent for this long is killed and replaced; nginx's proxy_read_timeout
# matches it, so nginx does not give up first.
timeout = env_int("PORTAL_WEB_TIMEOUT_S", 60, minimum=10)
graceful_timeout = 30
# Recycle workers now and then, staggered, so none grows without bound.
max_requests = 2000
max_requests_jitter = 200
# Requests come from nginx on a trusted address; bounded request lines and headers.
limit_request_line = 8190
limit_request_fields = 100
proc_name = "slurm-gpu-portal-web"
# systemd manages the processes (reload: HUP); no control socket, whose default place is
# the user's home, which the unit keeps closed (an older gunicorn ignores the name).
control_socket_disable = True
# Both logs to the journal (standard output and error), which only root and the adm and
# systemd-journal groups read: the access log holds the OpenID provider's authorisation
# codes (the sign-in callback's query). Logging to a file instead, make it 0640.
accesslog = "-"
errorlog = "-"


def on_starting(server):
    """The web tier's metrics folder (PROMETHEUS_MULTIPROC_DIR, the unit's
    RuntimeDirectory) starts empty: counts of an earlier run are not carried over."""
    metric_files_reset()


def child_exit(server, worker):
    """A web worker has exited: its gauges stop counting as a live process's (Prometheus
    multiprocess mode keeps one file per process; its counters stay in the sums)."""
    metric_files_process_dead(worker.pid)
