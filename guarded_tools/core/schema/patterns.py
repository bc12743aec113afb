"""Provides ECMA-262 patterns: matching them, and refusing the ones that backtrack exponentially.

JSON Schema patterns are ECMA-262 regular expressions with the ``u`` flag (core
2020-12, section 6.4), matched here with regress, not Python's ``re``: ``\\d`` is
``[0-9]`` (``re`` also takes Arabic-Indic, full-width or Thai digits), ``$`` is the end
of the string (``re`` also matches before a final newline), ``\\w`` and ``\\b`` are ASCII.

regress backtracks. A pattern whose repeated group can split its input in many ways,
``^(\\w+\\s?)*$`` or ``(a+)+``, costs time exponential in the length of a string that
almost matches: one request could hold a worker for hours. Such patterns are refused
when a tool is registered (:func:`backtracking_risk`). The check is conservative: it
refuses a repeated group whose body is, apart from optional parts, one repeated item;
it cannot prove every accepted pattern fast (``maxLength`` bounds what the rest cost).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import regress
from jsonschema import Draft202012Validator, FormatChecker

#: JSON Schema 2020-12 asks for ECMA-262 with Unicode support.
ECMA_FLAGS = "u"
#: A bounded repetition counts as unbounded from this many repeats on.
MANY = 10


@functools.lru_cache(maxsize=4096)
def ecma_regex(pattern: str) -> regress.Regex:
    """The compiled ECMA-262 expression of a schema's (trusted) pattern.

    Raises :class:`regress.RegressError` when ``pattern`` is not valid ECMA-262.
    """
    return regress.Regex(pattern, ECMA_FLAGS)


def ecma_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text``, as JavaScript's ``RegExp.test``.

    A string that is not Unicode text (a lone surrogate, which only Python callers can
    produce: parsed input refuses it) matches no pattern.
    """
    try:
        return ecma_regex(pattern).find(text) is not None
    except UnicodeEncodeError:
        return False


class PatternRisk(ValueError):
    """A schema's pattern could make matching take exponential time."""


# -- a small ECMA-262 parser, only as deep as the backtracking check needs ----------------------


@dataclass
class _Group:
    alternatives: list[list[_Item]] = field(default_factory=lambda: [[]])
    zero_width: bool = False  # a lookaround


@dataclass
class _Item:
    atom: _Group | str  # a group, "char" (one character or class) or "empty" (assertion)
    low: int = 1
    high: int | None = 1  # None: unbounded

    @property
    def optional(self) -> bool:
        return self.low == 0 or _nullable(self.atom)

    @property
    def repeats(self) -> bool:
        """It matches a non-empty string a varying number of times (``+``, ``{1,3}``)."""
        varies = self.high is None or self.high > max(self.low, 1)
        return varies and not _nullable(self.atom)

    @property
    def many(self) -> bool:
        return self.high is None or self.high >= MANY


def _nullable(atom: _Group | str) -> bool:
    if isinstance(atom, str):
        return atom == "empty"
    return atom.zero_width or any(all(i.optional for i in seq) for seq in atom.alternatives)


def _parse(pattern: str) -> _Group:
    """The group structure of a pattern regress already accepted."""
    root = _Group()
    stack = [root]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        seq = stack[-1].alternatives[-1]
        if c == "\\":
            nxt = pattern[i + 1] if i + 1 < n else ""
            i = _skip_escape(pattern, i)
            zero_width = nxt == "k" or nxt in ("b", "B") or (nxt.isdigit() and nxt != "0")
            seq.append(_Item("empty" if zero_width else "char"))  # \b, or a backreference
            continue
        if c == "[":
            i = _skip_class(pattern, i)
            seq.append(_Item("char"))
            continue
        if c == "(":
            group = _Group(zero_width=pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i))
            seq.append(_Item(group))
            stack.append(group)
            if group.zero_width:
                i += 4 if pattern[i + 2] == "<" else 3
            elif pattern.startswith("(?<", i):
                i = pattern.index(">", i) + 1  # a named group
            elif pattern.startswith("(?", i):
                i = pattern.index(":", i) + 1  # (?: and modifiers such as (?i:
            else:
                i += 1
            continue
        if c == ")":
            stack.pop()
            i += 1
            continue
        if c == "|":
            stack[-1].alternatives.append([])
            i += 1
            continue
        if c in "*+?{" and seq:
            i = _quantify(pattern, i, seq[-1])
            continue
        seq.append(_Item("empty" if c in "^$" else "char"))
        i += 1
    return root


def _skip_escape(pattern: str, i: int) -> int:
    nxt = pattern[i + 1] if i + 1 < len(pattern) else ""
    if nxt in ("p", "P", "k") or pattern.startswith("u{", i + 1):
        close = "}" if nxt != "k" else ">"
        return pattern.index(close, i) + 1
    if nxt.isdigit():
        j = i + 1
        while j < len(pattern) and pattern[j].isdigit():
            j += 1
        return j
    return i + 2


def _skip_class(pattern: str, i: int) -> int:
    i += 1
    while pattern[i] != "]":
        i = _skip_escape(pattern, i) if pattern[i] == "\\" else i + 1
    return i + 1


def _quantify(pattern: str, i: int, item: _Item) -> int:
    c = pattern[i]
    if c == "{":
        close = pattern.index("}", i)
        low, _, high = pattern[i + 1 : close].partition(",")
        item.low = int(low)
        item.high = int(low) if "," not in pattern[i:close] else (int(high) if high else None)
        i = close + 1
    else:
        item.low, item.high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        i += 1
    if i < len(pattern) and pattern[i] == "?":
        i += 1  # lazy: tries the same splits in another order
    return i


def _loops(item: _Item) -> bool:
    """``item`` can match one string as several runs of itself."""
    if item.repeats:
        return True
    group = item.atom
    return isinstance(group, _Group) and not group.zero_width and any(
        _one_loop(seq) for seq in group.alternatives
    )


def _one_loop(seq: list[_Item]) -> bool:
    """The sequence is one looping item, everything else in it optional."""
    required = [item for item in seq if not item.optional]
    return len(required) <= 1 and any(_loops(item) for item in required or seq)


def _risky(group: _Group) -> bool:
    """Some group in ``group`` repeats many times around a body that loops by itself."""
    for seq in group.alternatives:
        for item in seq:
            atom = item.atom
            if not isinstance(atom, _Group):
                continue
            if item.many and not atom.zero_width and any(map(_one_loop, atom.alternatives)):
                return True
            if _risky(atom):
                return True
    return False


def backtracking_risk(pattern: str) -> str | None:
    """Why matching ``pattern`` can take exponential time, or None.

    ``pattern`` must already be valid ECMA-262 (see :func:`ecma_regex`).
    """
    try:
        tree = _parse(pattern)
    except (ValueError, IndexError):
        return None  # a construct this reader does not know: regress accepted it
    if _risky(tree):
        return (
            "a repeated group whose body is itself one repeated item, like (a+)+ or"
            " (\\w+\\s?)*, can split one string in exponentially many ways, and the"
            " matcher tries them all on a string that almost matches"
        )
    return None


# -- format: regex -------------------------------------------------------------------------------


def _is_regex(instance: object) -> bool:
    """``format: regex`` in ECMA-262; compiled uncached (the instance is untrusted)."""
    if not isinstance(instance, str):
        return True
    try:
        regress.Regex(instance, ECMA_FLAGS)
    except UnicodeEncodeError:
        return False
    return True


def _is_schema_pattern(instance: object) -> bool:
    """A schema's own pattern: valid ECMA-262, and safe to match."""
    if not isinstance(instance, str):
        return True
    ecma_regex(instance)
    risk = backtracking_risk(instance)
    if risk:
        raise PatternRisk(risk)
    return True


def _format_checker(regex: object, raises: tuple[type[Exception], ...]) -> FormatChecker:
    checker = FormatChecker(())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks("regex", raises=raises)(regex)  # type: ignore[arg-type]
    return checker


#: Draft 2020-12's format checks, with ``regex`` meaning ECMA-262 (for instances).
FORMAT_CHECKER = _format_checker(_is_regex, (regress.RegressError,))
#: The same, for checking a tool's schema: its patterns must also be safe to match.
SCHEMA_FORMAT_CHECKER = _format_checker(_is_schema_pattern, (regress.RegressError, PatternRisk))
