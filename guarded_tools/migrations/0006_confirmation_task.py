# MCP tasks wait on confirmations: a task-held call runs on approval, a failed run is kept
# for its poll, and an agent may withdraw its request (a status and an audit action).

import django.core.serializers.json
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('guarded_tools', '0005_confirmation_reported_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='confirmation',
            name='task',
            field=models.BooleanField(default=False, help_text='An MCP client holds a task for this call (the Tasks extension): it polls instead of retrying, so an approval runs the call at once.', verbose_name='awaited by a task'),
        ),
        migrations.AddField(
            model_name='confirmation',
            name='task_error',
            field=models.JSONField(blank=True, encoder=django.core.serializers.json.DjangoJSONEncoder, help_text="What the approved run answered when it refused or failed without storing an outcome on its operation (the agent-facing error), for the task's poll.", null=True, verbose_name='task error'),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='action',
            field=models.CharField(choices=[('approve', 'approved confirmation'), ('decline', 'declined confirmation'), ('withdraw', 'withdrew confirmation'), ('mark_succeeded', 'marked operation succeeded'), ('mark_not_executed', 'marked operation not executed'), ('mark_failed', 'marked operation failed')], max_length=32, verbose_name='action'),
        ),
        migrations.AlterField(
            model_name='confirmation',
            name='status',
            field=models.CharField(choices=[('pending', 'pending'), ('approved', 'approved'), ('declined', 'declined'), ('expired', 'expired'), ('consumed', 'consumed'), ('withdrawn', 'withdrawn')], default='pending', max_length=20, verbose_name='status'),
        ),
    ]
