from django.contrib.auth.management import create_permissions
from django.db import migrations


# Frozen here on purpose: later migrations change the group, never this list.
ALLOCATION_MANAGERS = "Allocation managers"
ALLOCATION_MANAGER_PERMISSIONS = [
    ("accounts", "user", ("view",)),
    ("accounts", "project", ("view", "add", "change")),
    ("accounts", "membership", ("view", "add", "change", "delete")),
    ("accounts", "allocation", ("view", "add", "change")),
    ("clusters", "cluster", ("view",)),
    ("clusters", "partition", ("view", "change")),
]


def create_group(apps, schema_editor):
    # Permissions are normally created after all migrations ran; make them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=ALLOCATION_MANAGERS)
    codenames = [
        (app_label, f"{action}_{model}")
        for app_label, model, actions in ALLOCATION_MANAGER_PERMISSIONS
        for action in actions
    ]
    permissions = [
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
        for app_label, codename in codenames
    ]
    group.permissions.set(permissions)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=ALLOCATION_MANAGERS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("clusters", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
