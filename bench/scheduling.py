"""How fast the dev cluster starts and finishes a burst of short one-GPU jobs.

Submits N jobs (`true`, one GPU each) as a demo POSIX user and measures the
time from the first submission until sacct reports every one COMPLETED, beside
the time the submissions alone took (the baseline, measured in the same run).

    .venv/bin/python bench/scheduling.py [--jobs 20] [--user alice] [--account vision]

Needs the dev stack (`dev/stack start`) and the demo data (`manage.py seed_demo`).
"""

import argparse
import json
import subprocess
import time


def submit(user: str, account: str, partition: str) -> str:
    result = subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--account={account}",
         f"--partition={partition}", "--gpus=1", "--time=1", "--output=/dev/null",
         "--chdir=/tmp", "--wrap", "true"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip().split(";")[0]


def completed(job_ids: list[str]) -> int:
    result = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(job_ids)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return sum(1 for line in result.stdout.splitlines() if line.endswith("|COMPLETED"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--user", default="alice")
    parser.add_argument("--account", default="vision")
    parser.add_argument("--partition", default="debug")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()

    started = time.monotonic()
    job_ids = [submit(args.user, args.account, args.partition) for _ in range(args.jobs)]
    submitted_s = time.monotonic() - started
    while (done := completed(job_ids)) < len(job_ids):
        if time.monotonic() - started > args.timeout:
            raise SystemExit(f"only {done}/{len(job_ids)} jobs completed in {args.timeout:g} s")
        time.sleep(0.1)
    all_done_s = time.monotonic() - started

    print(f"{'jobs':<28}{args.jobs:>10}")
    print(f"{'submit all (baseline)':<28}{submitted_s:>9.2f}s")
    print(f"{'submit → all completed':<28}{all_done_s:>9.2f}s")
    print(f"{'per job':<28}{all_done_s / args.jobs * 1000:>8.0f}ms")
    print(f"{'completed / submit ratio':<28}{all_done_s / submitted_s:>10.1f}")
    print(
        json.dumps(
            {
                "jobs": args.jobs,
                "submit_all_s": round(submitted_s, 3),
                "all_completed_s": round(all_done_s, 3),
                "completed_vs_submit_ratio": round(all_done_s / submitted_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
