"""sgp projects, jobs, show and cancel: tables for people, the API's JSON for scripts,
the cursor followed up to --limit."""

import httpx

from tests.client.conftest import URL, error, job_json


def allocation(cluster: str, state: str = "active", **hours: float) -> dict:
    return {"cluster": cluster, "state": state, **hours}


PROJECTS = [
    {
        "slug": "vision",
        "name": "Vision Lab",
        "role": "member",
        "balance": {
            "granted_gpu_hours": 1100.0,
            "used_gpu_hours": 12.345,
            "held_gpu_hours": 0.5,
            "available_gpu_hours": 1087.156,
        },
        "allocations": [
            allocation(
                "portal-dev",
                granted_gpu_hours=1000.0,
                used_gpu_hours=12.345,
                held_gpu_hours=0.5,
                available_gpu_hours=987.156,
            ),
            allocation(
                "portal-next",
                granted_gpu_hours=100.0,
                used_gpu_hours=0.0,
                held_gpu_hours=0.0,
                available_gpu_hours=100.0,
            ),
            allocation(
                "portal-dev",
                state="expired",
                granted_gpu_hours=5.0,
                used_gpu_hours=5.0,
                held_gpu_hours=0.0,
                available_gpu_hours=0.0,
            ),
        ],
    },
    {
        "slug": "genomics",
        "name": "Genomics Group",
        "role": "pi",
        "balance": {
            "granted_gpu_hours": 0.0,
            "used_gpu_hours": 0.0,
            "held_gpu_hours": 0.0,
            "available_gpu_hours": 0.0,
        },
        "allocations": [],
    },
]


def test_projects_is_a_table_of_gpu_hours_per_cluster_with_two_decimals(sgp, portal):
    portal.on("GET", "projects/", httpx.Response(200, json=PROJECTS))
    result = sgp("projects", portal=portal)
    assert result.code == 0, result.err
    header, on_dev, on_next, genomics = result.out.splitlines()
    assert header.split()[:4] == ["SLUG", "NAME", "ROLE", "CLUSTER"]
    assert on_dev.split()[-5:] == ["portal-dev", "1,000.00", "12.35", "0.50", "987.16"]
    assert on_next.split()[-5:] == ["portal-next", "100.00", "0.00", "0.00", "100.00"]
    # The expired allocation is left out; a project without one shows its zeros once.
    assert genomics.split()[-5:] == ["-", "0.00", "0.00", "0.00", "0.00"]
    # Aligned: every row's last column ends where the header's does.
    assert len({len(header), len(on_dev), len(on_next), len(genomics)}) == 1


def test_projects_json_is_the_apis(sgp, portal):
    portal.on("GET", "projects/", httpx.Response(200, json=PROJECTS))
    assert sgp("projects", "--json", portal=portal).json() == PROJECTS


def page(jobs, next_query=None):
    following = f"{URL}/api/v1/jobs/?{next_query}" if next_query else None
    return httpx.Response(200, json={"next": following, "previous": None, "results": jobs})


def test_jobs_follows_the_cursor_up_to_the_limit(sgp, portal):
    def answer(request):
        cursor = request.url.params.get("cursor")
        if cursor is None:
            return page([job_json(id=i) for i in (9, 8)], "cursor=c2&page_size=2&state=running")
        if cursor == "c2":
            return page([job_json(id=i) for i in (7, 6)], "cursor=c3&page_size=2&state=running")
        return page([job_json(id=5)])

    portal.on("GET", "jobs/", answer)
    result = sgp("jobs", "--state", "running", "--limit", "3", "--json", portal=portal)
    assert result.code == 0, result.err
    assert [job["id"] for job in result.json()] == [9, 8, 7]
    first, second = portal.requests
    assert dict(first.url.params) == {"page_size": "3", "state": "running"}
    assert dict(second.url.params) == {"cursor": "c2", "page_size": "2", "state": "running"}


def test_jobs_reads_every_page_when_the_limit_allows(sgp, portal):
    portal.on(
        "GET",
        "jobs/",
        page([job_json(id=2)], "cursor=next"),
        page([job_json(id=1)]),
    )
    result = sgp("jobs", "--json", portal=portal)
    assert [job["id"] for job in result.json()] == [2, 1]
    assert result.err == ""


def test_jobs_passes_its_filters_and_caps_the_page_size(sgp, portal):
    portal.on("GET", "jobs/", page([]))
    sgp("jobs", "--state", "running,pending", "--state", "failed", "--project", "vision",
        "--search", "resnet", "--limit", "500", portal=portal)  # fmt: skip
    assert dict(portal.requests[0].url.params) == {
        "page_size": "200",
        "state": "running,pending,failed",
        "project": "vision",
        "search": "resnet",
    }


def test_jobs_is_a_table_and_says_when_there_are_more(sgp, portal):
    jobs = [
        job_json(id=12, state="running", used_gpu_hours=None, gpus_per_node=4, nodes=2),
        job_json(id=3, name="eval", state="completed", used_gpu_hours=0.25, slurm_job_id=None),
    ]
    portal.on("GET", "jobs/", page(jobs, "cursor=more"))
    result = sgp("jobs", "--limit", "2", portal=portal)
    header, first, second = result.out.splitlines()
    assert header.split()[:5] == ["ID", "NAME", "PROJECT", "PARTITION", "STATE"]
    assert first.split()[:7] == ["12", "train", "vision", "debug", "running", "4242", "8"]
    assert second.split()[:9] == ["3", "eval", "vision", "debug", "completed", "-", "1", "0.50",
                                  "0.25"]  # fmt: skip
    assert "raise --limit" in result.err


def test_show_prints_the_facts_and_the_timeline(sgp, portal):
    job = job_json(state="failed", exit_code=1, used_gpu_hours=0.1234, depends_on=[3, 4])
    portal.on("GET", "jobs/12/", httpx.Response(200, json=job))
    result = sgp("show", "12", "--script", portal=portal)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "state        failed (exit code 1)" in lines
    assert "used         0.12 GPU-hours" in lines
    assert "depends on   3, 4" in lines
    assert "timeline:" in lines
    timeline = lines[lines.index("timeline:") + 1 :]
    assert timeline[0].split() == ["AT", "STATE", "DETAIL"]
    assert timeline[1].split()[2:] == ["new", "held", "0.50", "GPU-hours"]
    assert result.out.endswith(job["rendered_script"])


def test_show_json_is_the_apis(sgp, portal):
    portal.on("GET", "jobs/12/", httpx.Response(200, json=job_json()))
    assert sgp("show", "12", "--json", portal=portal).json() == job_json()


def test_an_unknown_job_exits_4_with_the_apis_message(sgp, portal):
    portal.on("GET", "jobs/99/", error(404, "not_found", "There is no job 99 of yours."))
    result = sgp("show", "99", portal=portal)
    assert result.code == 4
    assert result.err.strip() == "sgp: There is no job 99 of yours."
    assert len(portal.requests) == 1  # a 404 is an answer: no retry


def test_show_wait_polls_until_the_job_ends_and_exits_by_its_outcome(sgp, portal):
    portal.on(
        "GET",
        "jobs/12/",
        httpx.Response(200, json=job_json(state="running")),
        httpx.Response(200, json=job_json(state="completed", exit_code=0)),
    )
    assert sgp("show", "12", "--wait", portal=portal).code == 0
    assert len(portal.requests) == 2
    portal.on("GET", "jobs/12/", httpx.Response(200, json=job_json(state="timeout")))
    result = sgp("show", "12", "--wait", "--json", portal=portal)
    assert result.code == 1
    assert result.json()["state"] == "timeout"
    assert "job 12 ended timeout" in result.err


def test_cancel_posts_and_says_what_happens(sgp, portal):
    portal.on("POST", "jobs/12/cancel/", httpx.Response(202, json=job_json(state="running")))
    result = sgp("cancel", "12", portal=portal)
    assert result.code == 0
    assert "cancel requested" in result.out
    portal.on(
        "POST", "jobs/13/cancel/", httpx.Response(202, json=job_json(id=13, state="cancelled"))
    )
    assert sgp("cancel", "13", portal=portal).out == "Job 13 is cancelled.\n"


def test_cancelling_an_ended_job_is_refused_with_5(sgp, portal):
    portal.on("POST", "jobs/12/cancel/", error(400, "invalid", "The job has already ended."))
    result = sgp("cancel", "12", portal=portal)
    assert result.code == 5 and "already ended" in result.err
    assert len(portal.requests) == 1
