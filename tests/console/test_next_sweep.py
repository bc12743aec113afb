"""Issue 28 item 5: an abandoned operation's page says when the next sweep takes it over.

Each sweep writes when it started to Django's cache; the beat schedule (or the sweep
loop's interval) says how often. The page says "next sweep at …" when both are known, "due
now" (and asks whether beat runs) when the time passed, the interval alone when this
process's cache never saw a sweep, and that none is scheduled when nothing runs it.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from celery.schedules import crontab
from django.core.cache import cache
from django.core.management import call_command
from django.utils import timezone

from guarded_tools.console.formatting import when
from guarded_tools.pipeline.recovery import LAST_SWEEP_KEY, last_sweep, sweep
from tests.console.pages import OPS_LIST, RECONCILER, incident, staff_client

pytestmark = pytest.mark.django_db

SWEEP_TASK = "guarded_tools.tasks.sweep"


@pytest.fixture(autouse=True)
def no_sweep_seen() -> Iterator[None]:
    cache.delete(LAST_SWEEP_KEY)
    yield
    cache.delete(LAST_SWEEP_KEY)


def sentence(user_factory: Any, operation: Any) -> str:
    page = staff_client(user_factory, *RECONCILER).get(
        f"{OPS_LIST}{operation.pk}/change/").content.decode()
    assert 'data-testid="abandoned"' in page
    return html.unescape(page.split('data-testid="next-sweep">')[1].split("</span>")[0])


def swept_at() -> datetime:
    seen = last_sweep()
    assert seen is not None
    return seen["at"]  # type: ignore[no-any-return]


def test_the_last_sweep_plus_the_beat_interval_is_the_next_sweep(
        user_factory: Any, settings: Any) -> None:
    settings.CELERY_BEAT_SCHEDULE = {"sweep": {"task": SWEEP_TASK, "schedule": 30.0}}
    sweep()  # nothing to recover yet: it writes when it ran
    operation = incident("abandoned")
    said = sentence(user_factory, operation)
    assert said.startswith(f"The next sweep, at {when(swept_at() + timedelta(seconds=30))},")
    assert "takes it over and runs the tool's recover hook" in said
    assert said.endswith("Sweeps run every 30 s.")


def test_a_sweep_never_seen_here_leaves_the_interval_only(
        user_factory: Any, settings: Any) -> None:
    settings.CELERY_BEAT_SCHEDULE = {"sweep": {"task": SWEEP_TASK,
                                               "schedule": timedelta(seconds=45)}}
    said = sentence(user_factory, incident("abandoned"))
    assert said.startswith("The sweep runs every 45 s (when it last ran is not known here")
    assert " at " not in said


def test_a_sweep_past_its_time_is_due_now_and_asks_whether_beat_runs(
        user_factory: Any, settings: Any) -> None:
    settings.CELERY_BEAT_SCHEDULE = {"sweep": {"task": SWEEP_TASK, "schedule": 30.0}}
    long_ago = timezone.now() - timedelta(minutes=10)
    cache.set(LAST_SWEEP_KEY, {"at": long_ago, "every": None}, timeout=None)
    said = sentence(user_factory, incident("abandoned"))
    assert said.startswith(f"The next sweep is due now (the last one started at"
                           f" {when(long_ago)}; every 30 s)")
    assert said.endswith("past its time: is Celery beat running?")


def test_a_sweep_loop_says_its_own_interval(user_factory: Any, settings: Any,
                                            monkeypatch: Any) -> None:
    """No beat entry: ``guarded_tools_sweep --loop --interval 12`` wrote its interval."""
    from guarded_tools.management.commands import guarded_tools_sweep

    settings.CELERY_BEAT_SCHEDULE = {}

    class Stop(Exception):
        pass

    def stop(seconds: float) -> None:
        assert seconds == 12
        raise Stop

    monkeypatch.setattr(guarded_tools_sweep.time, "sleep", stop)
    with pytest.raises(Stop):
        call_command("guarded_tools_sweep", "--loop", "--interval", "12", stdout=StringIO())
    said = sentence(user_factory, incident("abandoned"))
    assert said.startswith(f"The next sweep, at {when(swept_at() + timedelta(seconds=12))},")
    assert said.endswith("Sweeps run every 12 s.")


def test_a_crontab_entry_says_the_next_sweep_from_the_clock(
        user_factory: Any, settings: Any) -> None:
    settings.CELERY_BEAT_SCHEDULE = {"sweep": {"task": SWEEP_TASK,
                                               "schedule": crontab(minute="*/5")}}

    def next_five_minutes() -> str:
        now = timezone.now().replace(second=0, microsecond=0)
        return when(now + timedelta(minutes=5 - now.minute % 5))

    before = next_five_minutes()
    said = sentence(user_factory, incident("abandoned"))
    assert said.startswith(f"The next sweep, at {before},") or said.startswith(
        f"The next sweep, at {next_five_minutes()},"), said
    assert "Sweeps run every" not in said


def test_no_sweep_scheduled_says_what_recovers_it(user_factory: Any, settings: Any) -> None:
    settings.CELERY_BEAT_SCHEDULE = {"other": {"task": "elsewhere.task", "schedule": 30.0}}
    said = sentence(user_factory, incident("abandoned"))
    assert said.startswith("No periodic sweep is scheduled in these settings")
    assert "Recover now" in said


def test_a_cache_outage_costs_the_sentence_not_the_sweep(monkeypatch: Any) -> None:
    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "set", down)
    monkeypatch.setattr(cache, "get", down)
    assert sweep().errors == []
    assert last_sweep() is None
