# The counters moved to the metrics app (metrics/migrations/0001_initial.py), their tables kept:
# only Django's state changes here, no table is dropped.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ops", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="AttemptCounter"),
                migrations.DeleteModel(name="FailureCounter"),
                migrations.DeleteModel(name="JobCounter"),
            ],
            database_operations=[],
        )
    ]
