"""Allocation managers may read the audit log in the console; nobody may change it."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ALLOCATION_MANAGERS = "Allocation managers"
ADDED = ["view_auditevent"]


def add_permissions(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.get(name=ALLOCATION_MANAGERS)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="audit", codename__in=ADDED)
    )


def remove_permissions(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    group = Group.objects.get(name=ALLOCATION_MANAGERS)
    group.permissions.remove(
        *group.permissions.filter(content_type__app_label="audit", codename__in=ADDED)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("accounts", "0002_allocation_managers_group"),
    ]

    operations = [migrations.RunPython(add_permissions, remove_permissions)]
