"""A few global job templates that most GPU sites want on day one."""

from django.db import migrations

TEMPLATES = [
    {
        "name": "PyTorch training, one GPU",
        "description": "Train a model on a single GPU. Replace train.py with your entry point.",
        "defaults": {"name": "train", "gpus_per_node": 1, "cpus_per_gpu": 8,
                     "mem_per_gpu_gb": 32, "time_limit_minutes": 240},
        "script": (
            "# One GPU: CUDA_VISIBLE_DEVICES is set by Slurm.\n"
            "nvidia-smi || true\n"
            "python train.py --epochs 10\n"
        ),
    },
    {
        "name": "Multi-GPU torchrun, one node",
        "description": "Data-parallel training on every GPU of one node with torchrun.",
        "defaults": {"name": "torchrun", "gpus_per_node": 4, "cpus_per_gpu": 8,
                     "mem_per_gpu_gb": 32, "time_limit_minutes": 480},
        "script": (
            "# One process per GPU on this node.\n"
            'torchrun --standalone --nproc_per_node="$SLURM_GPUS_ON_NODE" train.py\n'
        ),
    },
    {
        "name": "Batch inference, job array",
        "description": "Ten shards of an inference run, at most four at a time.",
        "defaults": {"name": "infer", "gpus_per_node": 1, "cpus_per_gpu": 4,
                     "mem_per_gpu_gb": 16, "time_limit_minutes": 60, "array": "0-9%4"},
        "script": (
            "# Each array task processes one shard.\n"
            'python infer.py --shard "$SLURM_ARRAY_TASK_ID" --num-shards 10\n'
        ),
    },
    {
        "name": "CPU-only debug job",
        "description": "A quick check of the environment on the debug partition; no GPU-hours.",
        "defaults": {"name": "debug", "partition": "debug", "gpus_per_node": 0,
                     "time_limit_minutes": 15},
        "script": (
            'echo "Running on $(hostname) as $(id -un) in $(pwd)"\n'
            "nproc\n"
            "free -g || true\n"
        ),
    },
]  # fmt: skip


def create(apps, schema_editor):
    JobTemplate = apps.get_model("jobs", "JobTemplate")
    for template in TEMPLATES:
        JobTemplate.objects.get_or_create(
            name=template["name"], scope="global", defaults={**template, "scope": "global"}
        )


def remove(apps, schema_editor):
    JobTemplate = apps.get_model("jobs", "JobTemplate")
    JobTemplate.objects.filter(scope="global", name__in=[t["name"] for t in TEMPLATES]).delete()


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]
    operations = [migrations.RunPython(create, remove)]
