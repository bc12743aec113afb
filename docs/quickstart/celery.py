# mysite/celery.py: the site's Celery app, as Celery's guide for Django writes it. It reads
# every CELERY_* setting from settings.py and finds guarded_tools' tasks in its installed
# apps. Run a worker with beat beside the site: celery -A mysite worker -B
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

app = Celery("mysite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
