"""sgp caps: members' GPU-hour caps on a project's allocation (list, set, clear).

sgp caps list vision                     # every member's for the PI, yours for a member
sgp caps set vision 200 --member alice   # alice may spend at most 200 GPU-hours
sgp caps set vision 50                   # every member's default
sgp caps clear vision --member alice     # alice's own cap lifted (the default applies)
"""

import argparse
from typing import Any
from urllib.parse import quote

from client.exits import Exit
from client.formatting import as_json, hours, table
from client.session import Session, out


def _path(args: argparse.Namespace) -> str:
    path = f"projects/{quote(args.project, safe='')}/caps/"
    return path + (f"{quote(args.member, safe='')}/" if args.member else "")


def _params(args: argparse.Namespace) -> dict[str, str]:
    return {"cluster": args.cluster} if args.cluster else {}


def cmd_caps(args: argparse.Namespace, session: Session) -> int:
    api = session.api
    if args.action == "list":
        caps = api.get(f"projects/{quote(args.project, safe='')}/caps/", params=_params(args))
    elif args.action == "set":
        body: dict[str, Any] = {"gpu_hours": args.gpu_hours, **_params(args)}
        caps = api.request("PUT", _path(args), json=body, repeatable=True).json()
    else:
        caps = api.request("DELETE", _path(args), params=_params(args), repeatable=True).json()
    if args.json:
        out(as_json(caps))
        return Exit.OK
    default = caps.get("default_cap_gpu_hours")
    out(
        f"{caps['project']} on {caps['cluster']}: default cap "
        + (f"{hours(default)} GPU-hours" if default is not None else "none")
    )
    rows = [
        (
            row["username"],
            ("-" if row["cap_gpu_hours"] is None else hours(row["cap_gpu_hours"]))
            + ("" if row["own_cap"] or row["cap_gpu_hours"] is None else " (default)"),
            hours(row["used_gpu_hours"]),
            "-" if row["remaining_gpu_hours"] is None else hours(row["remaining_gpu_hours"]),
        )
        for row in caps["members"]
    ]
    out(table(["MEMBER", "CAP GPU-h", "USED+HELD GPU-h", "LEFT GPU-h"], rows, right=range(1, 4)))
    return Exit.OK
