"""Allocation managers may read the records Slurm listed that the portal refused, in the
console; nobody adds, changes or deletes them there (the syncs write them)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ALLOCATION_MANAGERS = "Allocation managers"
ADDED = ["view_refusedrecord"]


def add_permissions(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.get(name=ALLOCATION_MANAGERS)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="clusters", codename__in=ADDED)
    )


def remove_permissions(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    group = Group.objects.get(name=ALLOCATION_MANAGERS)
    group.permissions.remove(
        *group.permissions.filter(content_type__app_label="clusters", codename__in=ADDED)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0010_refused_records"),
        ("accounts", "0002_allocation_managers_group"),
    ]

    operations = [migrations.RunPython(add_permissions, remove_permissions)]
