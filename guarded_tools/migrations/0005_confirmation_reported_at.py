# A tool without keys asks a person anew once its agent has been told of a decline or
# an expiry; the journal's "removed" also covers a person's "not executed".

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("guarded_tools", "0004_indexes_for_the_admin_at_scale"),
    ]

    operations = [
        migrations.AddField(
            model_name="confirmation",
            name="reported_at",
            field=models.DateTimeField(
                blank=True,
                help_text=(
                    "When the agent was told of the decline or expiry. A tool without keys"
                    " asks anew on the next identical call after that."
                ),
                null=True,
                verbose_name="reported at",
            ),
        ),
        migrations.AlterField(
            model_name="journalentry",
            name="removed",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "Removed by the handler, or by a person who marked the operation not"
                    " executed; kept for history."
                ),
                verbose_name="removed",
            ),
        ),
    ]
