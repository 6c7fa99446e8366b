# Written as makemigrations writes it (its class attributes are what Django reads).
# ruff: noqa: RUF012
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("recipient", models.EmailField(max_length=254)),
                ("subject", models.CharField(max_length=200)),
                ("body", models.TextField()),
                ("status", models.CharField(default="queued", max_length=16)),
                ("message_id", models.CharField(blank=True, default="", max_length=255)),
            ],
        ),
    ]
