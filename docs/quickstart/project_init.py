# mysite/__init__.py: load the Celery app whenever Django starts, so that the tasks the
# site sends (approvers' emails, the sweep) go to the broker settings.py names.
from .celery import app as celery_app

__all__ = ["celery_app"]
