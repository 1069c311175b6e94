"""What a user's regular expression may cost: the check behind ``.str.contains / .match / .fullmatch``.

Python's ``re`` backtracks, and a few characters can stall it for hours: ``(a+)+$`` takes time
exponential in the length of the string, ``\\w*\\w*c`` cubic. The engine cannot be stopped from
another thread (and signals exist only in the main thread, and not on Windows), so instead of a
time box a pattern is judged before it runs, from its parse tree:

- the constructs whose backtracking is exponential are refused outright: a quantifier inside a
  repeated group (``(a+)+``, ``(a?)*``), a repeated alternation (``(a|ab)*``), back-references;
- what remains backtracks at most polynomially: per string of length L, about
  ``(L + 1) * prod(min(max_r, L) + 1 for each quantifier r) * prod(alternatives)`` steps. Summed
  over the column this must stay under `PATTERN_STEPS` (about a second of matching); a plain
  word, a character class or one quantifier pass on any realistic column.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .errors import SubsetError

try:  # Python 3.11+
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_constants
    import sre_parse

PATTERN_CHARS = 1000
PATTERN_STEPS = 2e9  # measured: 8e9 by the formula took 2-9 s (".*a.*b", "\w*\w*c" on 2,000 characters)
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)}
_REFERENCES = {sre_constants.GROUPREF, sre_constants.GROUPREF_EXISTS, getattr(sre_constants, "GROUPREF_IGNORE", None)}
_UNBOUNDED = sre_constants.MAXREPEAT


def pattern_shape(pattern, flags: int = 0) -> tuple[list[int], list[int]]:
    """The quantifiers' maximum counts and the alternations' widths of a safe pattern, else SubsetError."""
    if not isinstance(pattern, str):
        raise SubsetError(f"a pattern must be text, got {type(pattern).__name__}")
    if len(pattern) > PATTERN_CHARS:
        raise SubsetError(f"the pattern has {len(pattern):,} characters; at most {PATTERN_CHARS:,} are allowed")
    try:
        parsed = sre_parse.parse(pattern, int(flags))
    except re.error as exc:
        raise SubsetError(f"{pattern!r} is not a regular expression: {exc}") from None
    except (RecursionError, OverflowError, MemoryError):
        raise SubsetError(f"the pattern {pattern[:40]!r}... is nested too deeply") from None
    repeats: list[int] = []
    branches: list[int] = []
    _walk(parsed, False, pattern, repeats, branches)
    return repeats, branches


def _walk(items, repeated: bool, pattern: str, repeats: list[int], branches: list[int]) -> None:
    for op, value in items:
        if op in _REFERENCES:
            raise SubsetError(f"back-references are not allowed in patterns ({pattern!r})")
        if op in _REPEATS:
            low, high, body = value
            if repeated:
                raise SubsetError(f"{pattern!r} has a quantifier inside a repeated group, which can backtrack "
                                   "for hours (as (a+)+ does); write it without the nesting, e.g. a+")
            repeats.append(int(high))
            _walk(body, high > 1, pattern, repeats, branches)
        elif op is sre_constants.BRANCH:
            if repeated:
                raise SubsetError(f"{pattern!r} repeats an alternation, which can backtrack for hours "
                                   "(as (a|ab)* does); use a character class such as [ab]* or drop the repeat")
            alternatives = value[1]
            branches.append(len(alternatives))
            for alternative in alternatives:
                _walk(alternative, repeated, pattern, repeats, branches)
        elif op is sre_constants.SUBPATTERN:
            _walk(value[-1], repeated, pattern, repeats, branches)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            _walk(value[1], repeated, pattern, repeats, branches)
        elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
            _walk(value, repeated, pattern, repeats, branches)


def check_pattern_cost(pattern, flags: int, strings: pd.Series, column: str) -> None:
    """Refuse a pattern whose worst-case backtracking over these strings exceeds `PATTERN_STEPS`."""
    repeats, branches = pattern_shape(pattern, flags)
    lengths = pd.to_numeric(strings.str.len(), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    lengths = lengths[~np.isnan(lengths)]
    steps = (lengths + 1) * float(np.prod(branches, dtype=np.float64))
    for high in repeats:
        steps = steps * (np.minimum(lengths, float(high) if high != _UNBOUNDED else np.inf) + 1)
    total = float(steps.sum())
    if total > PATTERN_STEPS:
        open_ended = sum(1 for high in repeats if high == _UNBOUNDED)
        raise SubsetError(f"{pattern!r} could backtrack for long over column {column!r} (strings of up to "
                           f"{int(lengths.max()):,} characters, {len(repeats)} quantifiers of which {open_ended} "
                           f"open-ended: up to {total:.1e} steps, the limit is {PATTERN_STEPS:.0e}); use fewer or "
                           "bounded quantifiers (e.g. \\w{0,20}), or regex=False to look for plain text")
