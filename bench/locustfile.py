"""The simulated researchers of bench/load.py, which runs locust on this file (headless).

Each simulated researcher logs in once (a browser session of its own) and has a
personal access token of its own for the API. Between two things it waits 1-5 s,
as a person reading a page does, and then browses: the dashboard, the jobs list,
one of its jobs (whose page loads its output, and polls its status while it is
live), the composer (with the live preview as it types), one of its projects,
the API's jobs list or an estimate. About once a minute it submits a tiny job
(``true``, one GPU for a minute on the gpu partition, or no GPU on debug), half
of the time from the composer's form, half through the API.

bench/load.py hands over the researchers in the JSON file ``LOAD_CONFIG`` and
reads every request's outcome back from ``LOAD_RESULTS``, written when locust
quits: {"started", "spawned" (every researcher logged in), "stopped": epoch seconds,
"samples": {name: [[ms, status, started at], ...]}} (status 0: no HTTP answer).
Figures are computed there, not here.
"""

import itertools
import json
import os
import random
import re
import time
import uuid
from collections import defaultdict
from pathlib import Path

from locust import HttpUser, between, events, task

CONFIG = json.loads(Path(os.environ["LOAD_CONFIG"]).read_text())
RESULTS = Path(os.environ["LOAD_RESULTS"])
SUBMIT_EVERY_S = (45.0, 75.0)  # about one job a minute per researcher
SAMPLES: dict[str, list[tuple[float, int, float]]] = defaultdict(list)
RUN: dict[str, float] = {}
NUMBERS = itertools.count()
JOB_PATH = re.compile(r"/jobs/(\d+)/$")


@events.request.add_listener
def _record(name, response_time, response, start_time, **_kwargs) -> None:
    status = getattr(response, "status_code", 0) or 0
    SAMPLES[name].append((round(response_time, 2), status, round(start_time, 3)))


@events.test_start.add_listener
def _started(**_kwargs) -> None:
    RUN["started"] = time.time()


@events.spawning_complete.add_listener
def _spawned(**_kwargs) -> None:
    RUN["spawned"] = time.time()


@events.test_stop.add_listener
def _stopped(**_kwargs) -> None:
    RUN["stopped"] = time.time()


@events.quitting.add_listener
def _write(**_kwargs) -> None:
    RESULTS.write_text(json.dumps({**RUN, "samples": SAMPLES}))


class Researcher(HttpUser):
    wait_time = between(1, 5)

    def on_start(self) -> None:
        self.me = CONFIG["researchers"][next(NUMBERS) % len(CONFIG["researchers"])]
        self.api = {"Authorization": f"Bearer {self.me['token']}"}
        self.job_ids: list[int] = []  # the newest first
        # Spread the first submissions over the first minute.
        self.next_submit = time.monotonic() + random.uniform(5, SUBMIT_EVERY_S[1])
        self.client.get("/login/", name="GET /login/")
        with self.client.post(
            "/login/",
            data={
                "username": self.me["username"],
                "password": self.me["password"],
                "csrfmiddlewaretoken": self._csrf(),
            },
            allow_redirects=False,
            name="POST /login/",
            catch_response=True,
        ) as response:
            if response.status_code != 302:
                response.failure(f"login answered {response.status_code}")
        self.api_jobs()

    # --- what a researcher does next -------------------------------------------------

    @task
    def next_thing(self) -> None:
        if time.monotonic() >= self.next_submit:
            self.next_submit = time.monotonic() + random.uniform(*SUBMIT_EVERY_S)
            self.submit()
            return
        browse = random.choices(
            [
                self.dashboard,
                self.jobs_list,
                self.job_page,
                self.composer,
                self.project_page,
                self.api_jobs,
                self.api_estimate,
            ],
            weights=[3, 3, 3, 2, 1, 2, 1],
        )[0]
        browse()

    def dashboard(self) -> None:
        self.client.get("/", name="GET / (dashboard)")

    def jobs_list(self) -> None:
        params = {"page": random.choice(["1", "1", "1", "2", "3"])}
        if random.random() < 0.2:
            params["state"] = random.choice(["active", "completed", "failed"])
        self.client.get("/jobs/", params=params, name="GET /jobs/ (list)")

    def job_page(self, job_id: int | None = None) -> None:
        if job_id is None:
            if not self.job_ids:
                self.api_jobs()
                return
            # Mostly a recent job, now and then an older one.
            recent = self.job_ids[:5]
            job_id = random.choice(recent if random.random() < 0.7 else self.job_ids)
        page = self.client.get(f"/jobs/{job_id}/", name="GET /jobs/[id]/ (job page)")
        # The page loads its output at once, and refreshes its status while the job is live.
        self.client.get(
            f"/jobs/{job_id}/output/", params={"stream": "stdout"}, name="GET /jobs/[id]/output/"
        )
        if 'hx-trigger="every 3s"' in page.text:
            time.sleep(3)
            self.client.get(
                f"/jobs/{job_id}/status/",
                headers={"HX-Request": "true"},
                name="GET /jobs/[id]/status/",
            )

    def composer(self) -> None:
        self.client.get("/jobs/new/", name="GET /jobs/new/ (composer)")
        form = self._form()
        # The preview comes on load and again after each pause in the typing.
        for typed in range(random.randint(1, 3)):
            if typed:
                time.sleep(random.uniform(0.5, 1.5))
                form["time_limit_minutes"] = str(random.choice([1, 5, 10, 30]))
            self.client.post(
                "/jobs/new/preview/",
                data=form,
                headers={"HX-Request": "true"},
                name="POST /jobs/new/preview/",
            )

    def project_page(self) -> None:
        slug = random.choice(self.me["projects"])
        self.client.get(f"/projects/{slug}/", name="GET /projects/[slug]/")

    def api_jobs(self) -> None:
        response = self.client.get("/api/v1/jobs/", headers=self.api, name="GET /api/v1/jobs/")
        if response.status_code == 200:
            listed = [job["id"] for job in response.json()["results"]]
            self.job_ids = list(dict.fromkeys([*self.job_ids[:5], *listed]))[:60]

    def api_estimate(self) -> None:
        self.client.post(
            "/api/v1/jobs/estimate/",
            json=self._job(),
            headers=self.api,
            name="POST /api/v1/jobs/estimate/",
        )

    def submit(self) -> None:
        if random.random() < 0.5:
            self._submit_form()
        else:
            self._submit_api()

    # --- submissions -------------------------------------------------------------------

    def _submit_form(self) -> None:
        self.client.get("/jobs/new/", name="GET /jobs/new/ (composer)")
        form = self._form()
        self.client.post(
            "/jobs/new/preview/",
            data=form,
            headers={"HX-Request": "true"},
            name="POST /jobs/new/preview/",
        )
        with self.client.post(
            "/jobs/new/",
            data=form,
            allow_redirects=False,
            name="POST /jobs/new/ (submit)",
            catch_response=True,
        ) as response:
            found = JOB_PATH.search(response.headers.get("Location", ""))
            if response.status_code != 302 or found is None:
                response.failure(f"the composer answered {response.status_code}")
                return
        job_id = int(found.group(1))
        self.job_ids.insert(0, job_id)
        self.job_page(job_id)  # where the browser is sent

    def _submit_api(self) -> None:
        with self.client.post(
            "/api/v1/jobs/",
            json=self._job(),
            headers={**self.api, "Idempotency-Key": str(uuid.uuid4())},
            name="POST /api/v1/jobs/ (submit)",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                response.failure(f"the API answered {response.status_code}: {response.text[:200]}")
                return
            self.job_ids.insert(0, response.json()["id"])

    def _job(self) -> dict:
        gpu = random.random() < 0.75
        return {
            "project": random.choice(self.me["projects"]),
            "partition": "gpu" if gpu else "debug",
            "name": f"load-{random.randint(1, 999)}",
            "gpus_per_node": 1 if gpu else 0,
            "time_limit_minutes": 1,
            "working_directory": self.me["workdir"],
            "script": "true\n",
        }

    def _form(self) -> dict:
        job = self._job()
        return {
            "csrfmiddlewaretoken": self._csrf(),
            "project": job["project"],
            "template": "",
            "partition": job["partition"],
            "name": job["name"],
            "nodes": "1",
            "gpus_per_node": str(job["gpus_per_node"]),
            "cpus_per_gpu": "",
            "mem_per_gpu_gb": "",
            "time_limit_minutes": str(job["time_limit_minutes"]),
            "working_directory": job["working_directory"],
            "output_path": "",
            "error_path": "",
            "array": "",
            "environment": "",
            "script": job["script"],
        }

    def _csrf(self) -> str:
        return self.client.cookies.get("csrftoken", "")
