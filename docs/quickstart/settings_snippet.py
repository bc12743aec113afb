# Add these lines to the end of mysite/settings.py (the file `django-admin startproject
# mysite` wrote). They install guarded_tools and Django REST framework with token
# authentication, give SQLite the options concurrent calls need, and configure Celery.
import os

INSTALLED_APPS = [
    "guarded_tools",  # first: its panel on the admin's index page
    *INSTALLED_APPS,  # noqa: F821 - startproject's list, above in settings.py
    "rest_framework",
    "rest_framework.authtoken",  # agents' tokens: python manage.py drf_create_token <username>
    "shop",  # your app whose tools.py defines the tools (python manage.py startapp shop)
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",  # agents: Authorization: Token …
        "rest_framework.authentication.SessionAuthentication",  # people signed in to the site
    ],
}

# SQLite: writers wait for each other instead of failing with "database is locked".
# (PostgreSQL needs nothing here.)
DATABASES["default"]["OPTIONS"] = {  # noqa: F821 - startproject's DATABASES
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL;",
}

GUARDED_TOOLS = {
    # Where people open the admin: the start of the link in approvers' emails.
    "CONSOLE_BASE_URL": os.environ.get("CONSOLE_BASE_URL", "http://127.0.0.1:8000"),
}

# Celery (read by mysite/celery.py): the broker, and beat running the sweep that recovers
# calls whose process died and expires requests nobody decided. The worker sends
# approvers' emails and runs long calls: `celery -A mysite worker -B`.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0")
CELERY_TASK_ACKS_LATE = True
CELERY_BEAT_SCHEDULE = {
    "guarded-tools-sweep": {"task": "guarded_tools.tasks.sweep", "schedule": 30.0},
}
