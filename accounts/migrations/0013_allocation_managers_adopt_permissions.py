from django.contrib.auth.management import create_permissions
from django.db import migrations

ALLOCATION_MANAGERS = "Allocation managers"
# Added to the group by this migration: the Slurm import page (view) and adopting (add).
ADDED = [
    ("accounts", "view_adoptedaccount"),
    ("accounts", "add_adoptedaccount"),
]


def add_permissions(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.get(name=ALLOCATION_MANAGERS)
    for app_label, codename in ADDED:
        group.permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )


def remove_permissions(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    group = Group.objects.get(name=ALLOCATION_MANAGERS)
    for app_label, codename in ADDED:
        group.permissions.remove(
            *group.permissions.filter(content_type__app_label=app_label, codename=codename)
        )


class Migration(migrations.Migration):
    dependencies = [("accounts", "0012_adopted_accounts")]

    operations = [migrations.RunPython(add_permissions, remove_permissions)]
