"""Writes the docs' reference pages from the code, so they cannot drift from it.

``{gt-reference} settings`` (and ``errors``, ``checks``, ``commands``, ``permissions``,
``events``) renders one part of the reference from its source of truth: the settings
declaration (``guarded_tools.conf.SETTINGS``), the guard's error catalog, the system
checks' calls in the package's source, the management commands' parsers, the models'
permissions and the lifecycle events the pipeline emits. What the code has and the docs
cannot describe (an event or a permission without a note here) is a build warning, which
``make docs`` turns into an error. The same functions serve the tests (``tests/docs``).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import pprint
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[2] / "guarded_tools"

#: What each lifecycle event means: the ``stage`` of the ``GuardEvent`` an observer receives.
EVENTS: dict[str, str] = {
    "started": "A call entered the pipeline (after its input was read).",
    "budget_alert": "The call's reservation reached one of a budget's thresholds"
                    " (``Budget(alerts=...)``), once per window and principal; ``extra``"
                    " holds the budget, scope, threshold, measure, used and limit.",
    "authorized": "The caller's permissions allow the call.",
    "policy_decided": "The tool's approval policy chose a rule for this call (``rule`` and"
                      " ``decision`` in the event's meta).",
    "confirmation_requested": "The call waits for a person's approval; nothing ran.",
    "confirmed": "An approval was used: the approved call goes on to run.",
    "declined": "A person declined the request, or it expired; the call will not run.",
    "executed": "The handler returned (before its output was checked and stored).",
    "output_validated": "The output matched the tool's output schema.",
    "output_oversized": "The output was larger than the tool's output budget; the call failed.",
    "output_unmeasurable": "The output could not be serialized to measure it; the call failed.",
    "verified": "The tool's ``verify`` hook confirmed the effect.",
    "succeeded": "The operation was stored as succeeded; its output answers every replay.",
    "replayed": "A call with a key already used was answered from the stored operation: the"
                " handler did not run again.",
    "failed": "The handler raised, or a later stage refused its output; the operation is"
              " stored as failed (a replay answers the same error).",
    "recovered": "Recovery (the sweep, or a retry past the lease) completed an abandoned"
                 " operation with the tool's ``recover`` hook.",
    "outcome_unknown": "Nobody can tell whether the effect happened: the operation waits"
                       " for a person to reconcile it in the admin.",
    "allowance_used": "The call ran under a standing approval instead of asking a person"
                      " (``allowance`` and ``granted_by`` in the event's meta).",
    "allowance_passed": "An allowance could not cover the call (used up, over its per-call"
                        " bound, an input outside its constraints): the call takes the rule's"
                        " normal path (``allowance`` and ``why`` in the meta).",
    "allowance_stopped": "An allowance was suspended at this call: its policy now asks more,"
                         " or a person who granted it lost the permission or was deactivated.",
    "allowance_returned": "A claim released without its effect gave back its use of an"
                          " allowance.",
}

#: What each permission lets a person do in the admin (``app_label.codename``).
PERMISSIONS: dict[str, str] = {
    "approve_confirmation": "Approve or decline the requests that wait in the approval"
                            " queue (as the tool's policy allows: never one's own call"
                            " under ``Approvers(n)``).",
    "manage_budgets": "Set, change and remove budget overrides (a higher limit for a time).",
    "reconcile_operation": "Settle an operation whose outcome is unknown: mark it succeeded"
                           " (with its output), failed or not executed, after checking the"
                           " effect in the world.",
    "view_operation": "See operations, their journal and history in the admin.",
    "view_confirmation": "See the approval queue and every request's history.",
    "view_budgetoverride": "See budget overrides and the budgets' use.",
    "view_auditentry": "Read the audit trail.",
    "export_records": "Export the audit trail, operations and confirmations the admin's lists"
                      " show (CSV, JSON Lines), besides viewing them: each export is audited.",
}


#: What a site's people do about a code, where the docs say more (the page's own links).
SEE_ALSO: dict[str, str] = {
    "outcome_unknown": "A person with `reconcile_operation` settles the operation in the admin"
                       " after checking the world: [Recovering and reconciling"
                       " operations](../howto/operators.md). A `recover` hook makes it rare:"
                       " [A handler that survives crashes](../howto/crash-safe-handlers.md).",
    "confirmation_required": "Staff approve or decline the request in the admin: [Approving"
                             " requests in the admin](../howto/approvers.md); which calls wait"
                             " is the tool's [approval policy](../howto/approval-policies.md).",
    "rate_limited": "Limits per user and window: [Budgets, rate limits and"
                    " overrides](../howto/budgets.md).",
    "budget_exceeded": "Limits per user and window, and overrides for one user or group:"
                       " [Budgets, rate limits and overrides](../howto/budgets.md).",
}


@dataclass(frozen=True)
class Check:
    """One system check call found in the package's source."""

    id: str
    level: str
    message: str
    hint: str
    where: str


def _text(node: ast.expr | None) -> str:
    """A check's message or hint as written: f-string fields shown as ``{…}``."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) if isinstance(part, ast.Constant) else "{…}"
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.IfExp):
        return _text(node.body) + " / " + _text(node.orelse)
    return "{…}"


def checks() -> list[Check]:
    """Every ``checks.Error/Warning/…(…, id="guarded_tools.X000")`` in the package, by id."""
    found: list[Check] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            ident = keywords.get("id")
            if not (isinstance(ident, ast.Constant) and isinstance(ident.value, str)
                    and ident.value.startswith("guarded_tools.")):
                continue
            func = node.func
            level = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            message = _text(node.args[0] if node.args else keywords.get("msg"))
            found.append(Check(ident.value, level, message, _text(keywords.get("hint")),
                               str(path.relative_to(PACKAGE.parent))))
    return sorted(found, key=lambda c: (c.id[len("guarded_tools."):][1:], c.id))


def check_ids_in_source() -> set[str]:
    """Every check id the package's source names anywhere (a check made another way shows)."""
    ids: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        ids |= set(re.findall(r'id=f?"(guarded_tools\.[CEWI]\d{3})"',
                              path.read_text(encoding="utf-8")))
    return ids


def events() -> set[str]:
    """The lifecycle events the package emits (``….emit("stage", …)``)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "emit" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
    return found


def commands() -> list[str]:
    """The package's management commands."""
    import guarded_tools.management.commands as package
    return sorted(name for _, name, is_pkg in pkgutil.iter_modules(package.__path__)
                  if not is_pkg and not name.startswith("_"))


def permissions() -> list[tuple[str, str, str]]:
    """(model, codename, name) of every permission of the app's models."""
    from django.apps import apps
    rows = []
    for model in apps.get_app_config("guarded_tools").get_models():
        meta = model._meta
        for action in meta.default_permissions:
            rows.append((meta.object_name or "", f"{action}_{meta.model_name}",
                         f"Can {action} {meta.verbose_name_raw}"))
        rows += [(meta.object_name or "", codename, str(name))
                 for codename, name in meta.permissions]
    return rows


# -- rendering (MyST Markdown, put in place of the page's ``{gt-reference}`` marker) -----------

def _literal(value: Any) -> str:
    text = pprint.pformat(value, width=88, sort_dicts=False)
    return f"``{text}``" if "\n" not in text else ""


def _md(text: str) -> str:
    """A docstring-style text (``literal``) as Markdown (`literal`)."""
    return re.sub(r"``(.+?)``", r"`\1`", text).replace("\\ ", "")


def _cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def settings_md() -> Iterator[str]:
    from guarded_tools.conf import SETTINGS
    group = ""
    for setting in SETTINGS:
        if setting.group != group:
            group = setting.group
            yield f"## {group}"
            yield ""
        yield f"(setting-{setting.name})="
        yield f"### `{setting.name}`"
        yield ""
        kind = f"`{setting.type}`" + (" (an import string)" if setting.import_string else "")
        shown = _literal(setting.default)
        yield f"**Type** {kind} · **Default** {_md(shown) if shown else '(below)'}"
        yield ""
        if not shown:
            yield "```python"
            yield from pprint.pformat(setting.default, width=80).splitlines()
            yield "```"
            yield ""
        yield _md(setting.doc)
        yield ""


def errors_md() -> Iterator[str]:
    from guarded_tools.core.catalog import site_text
    from guarded_tools.core.codes import BUILTIN
    for entry in sorted(BUILTIN, key=lambda e: e.code):
        yield f'<span id="{entry.code}"></span>'
        yield ""
        yield f"(error-{entry.code})="
        yield f"## `{entry.code}` ({entry.status})"
        yield ""
        yield f"**Status** {entry.status} · **Retry** `{entry.retry}`"
        yield ""
        for label, text in (("Message", entry.message), ("Why", entry.why), ("Fix", entry.fix)):
            yield f"**{label}.** " + _escape(site_text(text))
            yield ""
        if entry.code in SEE_ALSO:
            yield f"**For the site.** {SEE_ALSO[entry.code]}"
            yield ""


def _escape(text: str) -> str:
    """Markdown's special characters escaped outside code spans (inside one, a backslash
    would be shown as it is)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else re.sub(r"([*_<>\\\[\]])", r"\\\1", part)
                   for part in parts)


def checks_md() -> Iterator[str]:
    by_id: dict[str, list[Check]] = {}
    for check in checks():
        by_id.setdefault(check.id, []).append(check)
    for ident, found in by_id.items():
        yield f"(check-{ident})="
        yield f"## `{ident}` ({found[0].level})"
        yield ""
        for check in found:
            yield f"- {_escape(check.message)}"
            if check.hint:
                yield f"  *Hint:* {_escape(check.hint)}"
        yield ""
        yield f"Raised in `{found[0].where}`."
        yield ""


def commands_md() -> Iterator[str]:
    for name in commands():
        module = importlib.import_module(f"guarded_tools.management.commands.{name}")
        command = module.Command()
        yield f"(command-{name})="
        yield f"## `{name}`"
        yield ""
        yield _escape(str(command.help))
        yield ""
        yield "```text"
        yield from command.create_parser("manage.py", name).format_help().splitlines()
        yield "```"
        yield ""


def permissions_md() -> Iterator[str]:
    yield "| permission | model | what it lets a person do |"
    yield "|---|---|---|"
    for model, codename, name in permissions():
        yield (f"| `guarded_tools.{codename}` | `{model}` |"
               f" {_cell(PERMISSIONS.get(codename, name + '.'))} |")
    yield ""


def events_md() -> Iterator[str]:
    yield "| event (`GuardEvent.stage`) | when it is sent |"
    yield "|---|---|"
    for name in sorted(events()):
        yield f"| `{name}` | {_cell(EVENTS.get(name, ''))} |"
    yield ""


RENDERERS = {"settings": settings_md, "errors": errors_md, "checks": checks_md,
             "commands": commands_md, "permissions": permissions_md, "events": events_md}

#: A page's marker: the line ``{gt-reference} KIND`` inside a fenced block of its own.
MARKER = re.compile(r"^```\{gt-reference\} (\w+)\n```$", re.M)


def render(source: str) -> str:
    """``source`` with each marker replaced by the generated Markdown."""
    return MARKER.sub(lambda m: "\n".join(RENDERERS[m.group(1)]()), source)


def missing() -> list[str]:
    """What the code has and the reference cannot describe: one line each."""
    problems = [f"lifecycle event {name!r} has no entry in EVENTS"
                for name in sorted(events() - set(EVENTS))]
    problems += [f"lifecycle event {name!r} in EVENTS is never emitted"
                 for name in sorted(set(EVENTS) - events())]
    problems += [f"permission {codename!r} has no entry in PERMISSIONS"
                 for _, codename, _ in permissions()
                 if codename not in PERMISSIONS and not codename.startswith(
                     ("add_", "change_", "delete_", "view_"))]
    problems += [f"check {ident} is made in a way the reference does not read"
                 for ident in sorted(check_ids_in_source() - {c.id for c in checks()})]
    problems += [f"setting {s.name} has no description"
                 for s in _settings() if not s.doc.strip()]
    return problems


def _settings() -> Any:
    from guarded_tools.conf import SETTINGS
    return SETTINGS


def setup(app: Any) -> dict[str, Any]:
    from sphinx.util import logging

    logger = logging.getLogger(__name__)

    def generate(app: Any, docname: str, source: list[str]) -> None:
        if MARKER.search(source[0]):
            source[0] = render(source[0])

    def report(app: Any) -> None:
        for problem in missing():
            logger.warning("reference: %s", problem)

    app.connect("source-read", generate)
    app.connect("builder-inited", report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
