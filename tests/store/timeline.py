"""An operation's timeline as its page shows it, and a payment whose outcome is first unknown."""

from __future__ import annotations

import re
from typing import Any

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "note": {"type": "string"}}}


def rows(page: str) -> list[tuple[str, str, str, str]]:
    """The timeline's rows: (when, what, attempt, who), in the page's order."""
    table = page.split('data-testid="timeline"')[1].split("</table>")[0]
    found = re.findall(r'<td class="gt-nowrap">([^<]*)</td>\s*<td>([^<]*)</td>\s*'
                       r'<td>([^<]*)</td>\s*<td data-testid="who">([^<]*)</td>', table)
    return [(w, t.strip(), a, who) for w, t, a, who in found]


class Payment:
    """A handler that journals, fails, and a recover hook that cannot tell: then it works."""

    def __init__(self) -> None:
        self.fail = True

    def handler(self, input: Any, ctx: Any) -> Any:
        ctx.operation.write({"phase": "sent", "reference": input["operationId"]})
        if self.fail:
            raise ConnectionError(f"upstream reset while paying {input['note']}")
        return {"paid": True}

    def recover(self, *, error: Any = None, **_: Any) -> Any:
        # The caller's own failure: not recovered (abandoned, for the sweep); the sweep
        # cannot tell either: a person decides.
        return {} if error is not None else {"outcome": "unknown"}

