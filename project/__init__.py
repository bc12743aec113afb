"""The guarded_tools demo site."""

from project.celery import app as celery_app

__all__ = ["celery_app"]
