"""Global job templates kept by managers in the console are recorded; a user's own are not."""

import pytest

from audit.models import AuditEvent
from jobs.models import JobTemplate
from jobs.services import job_template_create
from tests.audit.conftest import events, only

ADD = "/admin/jobs/jobtemplate/add/"


def add(client, **fields):
    values = {
        "name": "JAX on one GPU",
        "description": "",
        "defaults": '{"gpus_per_node": 1}',
        "script": "python main.py\n",
    }
    return client.post(ADD, values | fields)


def test_a_global_template_added_in_the_console_is_recorded(client, manny):
    client.force_login(manny)
    assert add(client).status_code == 302
    template = JobTemplate.objects.get(name="JAX on one GPU")
    assert (template.scope, template.owner) == ("global", None)
    event = only(AuditEvent.Action.TEMPLATE_CREATE)
    assert (event.actor, event.on_behalf_of, event.scope) == (manny, None, "")
    assert (event.target_type, event.target_id) == ("jobs.jobtemplate", str(template.pk))
    assert event.detail == {"name": "JAX on one GPU", "scope": "global"}


def test_a_template_with_defaults_it_cannot_set_is_refused_and_not_recorded(client, manny):
    client.force_login(manny)
    response = add(client, defaults='{"account": "root"}')
    assert response.status_code == 200
    assert b"Templates cannot set account" in response.content
    assert not JobTemplate.objects.filter(name="JAX on one GPU").exists()
    assert not events(AuditEvent.Action.TEMPLATE_CREATE)


@pytest.fixture
def global_template(manny):
    return job_template_create(
        user=manny, name="Torch", script="torchrun main.py\n", defaults={}, scope="global"
    )


def test_changing_a_global_template_in_the_console_is_recorded(client, manny, global_template):
    client.force_login(manny)
    url = f"/admin/jobs/jobtemplate/{global_template.pk}/change/"
    data = {"name": "Torch, 2 GPUs", "description": "", "defaults": '{"gpus_per_node": 2}'}
    assert client.post(url, data | {"script": "torchrun main.py\n"}).status_code == 302
    global_template.refresh_from_db()
    assert (global_template.name, global_template.defaults) == (
        "Torch, 2 GPUs",
        {"gpus_per_node": 2},
    )
    event = only(AuditEvent.Action.TEMPLATE_UPDATE)
    assert (event.actor, event.target_id) == (manny, str(global_template.pk))
    assert event.detail == {
        "name": "Torch, 2 GPUs",
        "scope": "global",
        "changed": ["name", "defaults"],
    }


def test_deleting_templates_in_the_console_is_recorded_for_their_owners(
    client, manny, alice, global_template
):
    mine = job_template_create(user=alice, name="Mine", script="echo\n", defaults={})
    client.force_login(manny)
    response = client.post(
        "/admin/jobs/jobtemplate/",
        {
            "action": "delete_selected",
            "_selected_action": [global_template.pk, mine.pk],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert not JobTemplate.objects.filter(pk__in=[global_template.pk, mine.pk]).exists()
    deleted = {e.target_repr: e for e in events(AuditEvent.Action.TEMPLATE_DELETE)}
    assert set(deleted) == {"Torch", "Mine"}
    assert (deleted["Torch"].actor, deleted["Torch"].on_behalf_of) == (manny, None)
    assert (deleted["Mine"].actor, deleted["Mine"].on_behalf_of) == (manny, alice)


def test_a_users_own_template_is_not_recorded(api, alice):
    response = api(alice).post(
        "/api/v1/templates/",
        {"name": "Mine", "script": "echo hi\n"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert not AuditEvent.objects.filter(target_type="jobs.jobtemplate").exists()
