"""How every view writes a number: the Python mirror of ``js/common/format.js``.

The views format in the browser, the kernel formats some text itself (hover details, legend notes),
and an Altair chart formats through Vega. All three write 12345.6 as "12346" and 0.000123 as
"1.23e-4": `format_number` is the JS function in Python (rounding half away from zero on the float's
exact value, as JavaScript's ``toPrecision`` does), and `NUMBER_EXPR` the same rule as a Vega
expression for axis labels and tooltips. ``tests/test_format.py`` holds them equal on a table of numbers.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

# formatNumber of js/common/format.js, as a Vega expression over `datum.value` (Vega writes a minus
# sign as U+2212; the views write "-")
NUMBER_EXPR = (
    "replace(isValid(datum.value) && isFinite(datum.value) ? (datum.value == 0 ? '0' : "
    "abs(datum.value) < 1e-3 || abs(datum.value) >= 1e6 ? format(datum.value, '.3~e') : "
    "abs(datum.value) >= 1000 ? format(datum.value, '.0f') : format(datum.value, '.4~r')) : "
    "isNaN(datum.value) || !isValid(datum.value) ? '–' : datum.value > 0 ? '∞' : '-∞', '\u2212', '-')"
)
# a tooltip takes a d3 format, not an expression: formatNumber's four significant digits
TOOLTIP_FORMAT = ".4~r"
# formatPercent of js/common/format.js: one decimal
PERCENT_FORMAT = ".1%"


def _significant(a: float, digits: int) -> tuple[Decimal, int]:
    """``a`` (> 0) rounded to ``digits`` significant digits, half away from zero, and its decimal exponent."""
    exact = Decimal(a)
    exponent = exact.adjusted()
    rounded = exact.quantize(Decimal(1).scaleb(exponent - digits + 1), rounding=ROUND_HALF_UP)
    if rounded.adjusted() > exponent:  # 9.9996 → 10.00: one more digit before the point
        exponent += 1
        rounded = exact.quantize(Decimal(1).scaleb(exponent - digits + 1), rounding=ROUND_HALF_UP)
    return rounded, exponent


def _plain(d: Decimal) -> str:
    return format(d.normalize(), "f")


def format_number(value) -> str:
    """A value as the views write it: 4 significant digits; whole units from 1,000 on; exponents
    below 1e-3 and from 1e6 on ("1.23e-4", "-1e+9"); NaN as "–"."""
    v = float(value)
    if math.isnan(v):
        return "–"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    a = abs(v)
    if a < 1e-3 or a >= 1e6:
        rounded, exponent = _significant(a, 4)
        mantissa = _plain(rounded.scaleb(-exponent))
        return f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"
    if a >= 1000:
        return sign + _plain(Decimal(a).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    rounded, _ = _significant(a, 4)
    return sign + _plain(rounded)


def format_integer(value) -> str:
    """A count with thousands separators ("12,346"), as ``formatInteger``."""
    v = float(value)
    if not math.isfinite(v):
        return format_number(v)
    return f"{int(Decimal(v).quantize(Decimal(1), rounding=ROUND_HALF_UP)):,}"


def format_percent(fraction) -> str:
    """A fraction as a percentage with one decimal ("12.3%"), as ``formatPercent``."""
    v = float(fraction)
    if not math.isfinite(v):
        return format_number(v)
    text = str(Decimal(v * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
    return f"{'0.0' if text == '-0.0' else text}%"
