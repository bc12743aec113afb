"""Celery app of the demo site; configuration comes from Django settings (CELERY_*)."""

import os
from pathlib import Path
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _broker_control_beside_data(sender: Celery, source: Any, **kwargs: Any) -> None:
    """Keep the filesystem broker's exchange tables beside its data folder.

    kombu's filesystem transport writes them to ``control_folder``, by default
    ``control/`` in the working directory (the repository), which is not git-ignored.
    """
    if not str(source.broker_url or "").startswith("filesystem:"):
        return
    options = dict(source.broker_transport_options or {})
    data_folder = options.get("data_folder_in")
    if data_folder and "control_folder" not in options:
        control = Path(data_folder).parent / "broker-control"
        control.mkdir(parents=True, exist_ok=True)
        options["control_folder"] = str(control)
        source.broker_transport_options = options
