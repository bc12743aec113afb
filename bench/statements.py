"""``python -m bench.statements``: SQL statements per guarded REST call, by kind of call.

Through Django's full request handling (DRF, the guard), authenticated without a
token lookup so that only the guard's and the effect's statements are counted:
a fresh call, a replay, an in-flight duplicate and a validation failure, for the
plain guarded tool (B) and the fully featured one (D). Transaction control
(BEGIN, COMMIT, SAVEPOINT) is listed too: each is a round trip. The same figures are
asserted by tests/store/test_sql_counts.py. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

#: Transaction control: each is a round trip of its own unless sent with other statements.
CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


def round_trips(queries: list[dict[str, Any]]) -> list[str]:
    """What reached the server, one entry per round trip, from Django's query log.

    Django logs a BEGIN when its block starts and a COMMIT when it ends; where the store
    sent them with its own statements, the logged ones never reached the server.
    """
    logged = [q["sql"] for q in queries]
    return [sql for i, sql in enumerate(logged)
            if not (sql == "BEGIN" and logged[i + 1:i + 2]
                    and logged[i + 1].startswith("BEGIN; "))
            and not (sql == "COMMIT" and i and logged[i - 1].endswith("; COMMIT"))]


def statements(sent: list[str], prepared: dict[str, str]) -> list[str]:
    """The statements of ``sent``: those sent together ("; "-joined) one each, an
    EXECUTE as the statement it runs (``prepared``: name -> SQL), a PREPARE as none."""
    return [prepared.get(part.split()[1].split("(")[0], "?") if part.startswith("EXECUTE ")
            else part
            for sql in sent for part in sql.split("; ") if not part.startswith("PREPARE ")]


def server_prepared(connection: Any) -> dict[str, str]:
    """The session's prepared statements (PostgreSQL's record of them): name -> SQL."""
    if connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        found = cursor.fetchall()
    return {name: part.split(" AS ", 1)[1] for name, statement in found
            for part in statement.split("; ") if part.startswith(f"PREPARE {name} AS ")}


def classify(queries: list[dict[str, Any]], prepared: dict[str, str]) -> dict[str, Any]:
    sent = round_trips(queries)
    kinds = [sql.split(None, 1)[0].upper() for sql in statements(sent, prepared)]
    control = [k for k in kinds if k in CONTROL]
    data = [k for k in kinds if k not in control]
    return {"statements": len(kinds), "data": data, "transaction_control": control,
            "round_trips": len(sent)}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from guarded_tools.store import OperationStore, fingerprint
    from guarded_tools.store.replays import replays

    user = User.objects.get(username="bench")
    client = APIClient()
    client.force_authenticate(user)
    scope = f"{user._meta.label_lower}:{user.pk}"
    out: dict[str, Any] = {"vendor": connection.vendor}
    for label, tool in (("B", "bench_insert"), ("D", "bench_insert_full")):
        url = f"/agent/tools/{tool}/"
        key = f"stmt-{uuid.uuid4().hex}"
        body = {"operationId": key, "value": 7}

        def post(data: Any, expect: int, url: str = url) -> list[dict[str, Any]]:
            # Django's permission cache lives on the user object: a fresh one per call,
            # as each real request has.
            client.force_authenticate(User.objects.get(pk=user.pk))
            with CaptureQueriesContext(connection) as ctx:
                response = client.post(url, data, format="json")
            assert response.status_code == expect, (response.status_code, response.content)
            return ctx.captured_queries

        # A first call of its own: what a process looks up once (the permissions' ids)
        # and the statements it prepares once per connection are not per call.
        post({"operationId": f"stmt-{uuid.uuid4().hex}", "value": 7}, 200)
        fresh = post(body, 200)
        replay = post(body, 200)  # this process saw it: the replay cache answers
        replays.clear()
        replay_cold = post(body, 200)  # as another process would replay it
        other = {"operationId": f"stmt-{uuid.uuid4().hex}", "value": 7}
        store = OperationStore()
        held = store.claim(tool=tool, scope=scope, key=other["operationId"],
                           fp=fingerprint(other), input=other, user=user, lease_seconds=60)
        in_flight = post(other, 409)
        # Gone once measured: abandoned a minute later, it would be swept by the
        # recovery benchmark that runs next and counted among its takeovers.
        store.release(held)
        invalid = post({"operationId": f"stmt-{uuid.uuid4().hex}", "value": "seven"}, 422)
        prepared = server_prepared(connection)
        out[label] = {name: classify(q, prepared) for name, q in (
            ("fresh", fresh), ("replay", replay), ("replay_cold", replay_cold),
            ("in_flight", in_flight), ("invalid", invalid))}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
