"""Base predicates over the instances table: what slice conjunctions are made of.

Each predicate is a boolean mask and the query text (in the subset language) that gives exactly
that mask, so a slice found over masks can be adopted as a `Subset` with the same members. Numeric
columns are cut at quantiles into bins, each also offered as a lower and an upper tail
(``x <= 15.3``, ``x > 15.3``), so a planted ``x > t`` is one predicate whatever bin ``t`` falls in.
A threshold is the shortest decimal between two neighbouring data values, compared in the column's
own dtype, so ``mean_radius <= 15.3`` is both readable and exact.
"""

from __future__ import annotations

import keyword
import math
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pandas as pd

from .errors import SliceError, SliceWarning

# names the subset language reads as something other than a column
_RESERVED = {"index", "score", "output", "abs", "True", "False", "None"}
# columns the store writes itself: searched only when asked for (pred and confidence give away the errors)
BUILT_IN = ("label", "pred", "correct", "confidence", "label_score", "nonfinite", "label_name", "pred_name")
MAX_LEVELS = 40  # categorical values kept per column (the most frequent)


@dataclass(frozen=True)
class Predicate:
    column: str
    text: str  # the query expression that selects exactly ``mask``
    mask: np.ndarray


def column_name(column: str) -> str:
    """The column as the subset language reads it (backticks when it is not a plain name)."""
    if column.isidentifier() and not keyword.iskeyword(column) and column not in _RESERVED \
            and not column.startswith("__"):  # the language refuses dunder names unquoted
        return column
    return f"`{column}`"


def default_columns(table: pd.DataFrame) -> list[str]:
    """The user's metadata columns; the true class only when there are none.

    Given the label, mislabelled instances are a slice of their own ("label == 1 and x > t" holds
    the flipped ones), which hides the group they belong to; pass ``columns=[..., "label"]`` to
    search per class.
    """
    meta = [str(c) for c in table.columns if c not in BUILT_IN]
    label = "label_name" if "label_name" in table.columns and table["label_name"].notna().all() else "label"
    return meta or [label]


def check_columns(table: pd.DataFrame, columns) -> list[str]:
    known = [str(c) for c in table.columns]
    if isinstance(columns, str):
        columns = [columns]
    if not isinstance(columns, (list, tuple, pd.Index, np.ndarray)) or \
            not all(isinstance(c, str) for c in columns):
        raise SliceError(f"columns= is a list of column names (of: {', '.join(known)}), not {columns!r}.")
    columns = list(dict.fromkeys(columns))
    unknown = [c for c in columns if c not in table.columns]
    if unknown:
        raise SliceError(f"Unknown column(s) {', '.join(map(repr, unknown))}; columns of this store: "
                         f"{', '.join(known)}.")
    quoted = [c for c in columns if "`" in str(c)]
    if quoted:
        raise SliceError(f"Column name(s) {', '.join(map(repr, quoted))} contain a backtick, which the subset "
                         "language cannot quote; rename them in the metadata.")
    return columns


def predicates(table: pd.DataFrame, columns: list[str], *, n_bins: int, min_support: int,
               rows: np.ndarray) -> tuple[list[Predicate], list[str]]:
    """Base predicates of the given columns over ``rows`` of the table, and notes on skipped columns.

    A column that cannot be cut into predicates (values of no kind the query language compares, a
    predicate whose query would not select exactly its rows) is skipped with a note and a
    `SliceWarning` naming it; the other columns are searched.
    """
    found: list[Predicate] = []
    notes: list[str] = []
    for column in columns:
        values = table[column].iloc[rows]
        name = column_name(column)
        try:
            if "`" in str(column):
                raise SliceError("its name holds a backtick, which the query language cannot quote")
            made = _column_predicates(values, name, n_bins, min_support)
            if _needs_check(values.dtype):
                made = _exact(made, table, rows)
        except Exception as exc:  # noqa: BLE001 - one odd column must not stop the search of the others
            note = f"column {column!r} skipped: {type(exc).__name__}: {exc}"
            warnings.warn(f"Slice discovery: {note}", SliceWarning, stacklevel=3)
            notes.append(note)
            continue
        if not made:
            notes.append(f"column {column!r}: no value or bin holds {min_support} instances")
        found.extend(Predicate(column, text, np.ascontiguousarray(mask, dtype=bool)) for text, mask in made)
    return found, notes


def _column_predicates(values: pd.Series, name: str, n_bins: int, min_support: int) -> list[tuple[str, np.ndarray]]:
    dtype = values.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        made = _temporal(values, name, n_bins, min_support) if values.nunique() > n_bins else \
            _categorical(values, name, min_support)
    elif pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype):
        made = _categorical(values, name, min_support)
    elif values.nunique(dropna=True) <= n_bins:
        made = _categorical(values, name, min_support)
    else:
        made = _numeric(values, name, n_bins, min_support)
    missing = values.isna().to_numpy(dtype=bool)
    if missing.sum() >= min_support:
        made.append((f"{name}.isna()", missing))
    return made


def _needs_check(dtype) -> bool:
    """Columns whose predicates are read back through the query language: all but plain numpy numbers and text,
    whose thresholds and literals are exact by construction."""
    return not (isinstance(dtype, np.dtype) and dtype.kind in "biuf")


def _exact(made: list[tuple[str, np.ndarray]], table: pd.DataFrame, rows: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The predicates whose query text selects exactly their rows (so an adopted slice is the slice found)."""
    from ..subsets.expression import _Context, _Expression

    context = _Context(SimpleNamespace(instances=table))
    return [(text, mask) for text, mask in made
            if np.array_equal(_Expression(text).evaluate(context)[rows], mask)]


def _categorical(values: pd.Series, name: str, min_support: int) -> list[tuple[str, np.ndarray]]:
    counts = values.value_counts(dropna=True)
    made = []
    for value, count in counts.iloc[:MAX_LEVELS].items():
        if count < min_support:
            break
        literal = _literal(value)
        if literal is not None:
            made.append((f"{name} == {literal}", (values == value).to_numpy(dtype=bool, na_value=False)))
    return made


def _literal(value) -> str | None:
    """A literal the subset language reads back as the same value (None: it has none)."""
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return repr(float(value))
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (pd.Timestamp, pd.Timedelta)) and not pd.isna(value):
        return repr(_time_text(value) if isinstance(value, pd.Timestamp) else str(value))
    return None


def _numeric(values: pd.Series, name: str, n_bins: int, min_support: int) -> list[tuple[str, np.ndarray]]:
    dtype = getattr(values.dtype, "numpy_dtype", values.dtype)  # a nullable Int64's int64
    data = values.to_numpy(dtype=np.float64, na_value=np.nan) if dtype != values.dtype else values.to_numpy()
    valid = ~pd.isna(data)
    edges = _edges(data[valid], n_bins, lambda low, high: _threshold(low, high, dtype))
    return _bins(name, [repr(e) for e in edges], [valid & (data <= e) for e in edges], valid, min_support)


def _temporal(values: pd.Series, name: str, n_bins: int, min_support: int) -> list[tuple[str, np.ndarray]]:
    """Dates and durations cut at quantiles like numbers, each threshold the roundest time between two values
    (a year, a month, a day, an hour ...), written as text the query language compares with the column."""
    tz = getattr(values.dtype, "tz", None)
    if tz is not None:
        values = values.dt.tz_convert("UTC").dt.tz_localize(None)
    valid = values.notna().to_numpy()
    keys = values.to_numpy().astype("datetime64[ns]" if values.dtype.kind == "M" else "timedelta64[ns]")
    keys = keys.view(np.int64)
    edges = _edges(keys[valid], n_bins, _round_time if values.dtype.kind == "M" else _round_duration)
    if values.dtype.kind == "M":
        texts = [repr(_time_text(pd.Timestamp(e).tz_localize("UTC").tz_convert(tz) if tz is not None
                                 else pd.Timestamp(e))) for e in edges]
    else:
        texts = [repr(str(pd.Timedelta(e))) for e in edges]
    return _bins(name, texts, [valid & (keys <= e) for e in edges], valid, min_support)


def _time_text(t: pd.Timestamp) -> str:
    """A time as the query compares it: the day alone at midnight, the offset when it has a zone."""
    if t.tzinfo is not None:
        return t.isoformat()
    return t.strftime("%Y-%m-%d") if t == t.normalize() else str(t)


def _round_time(low: int, high: int) -> int:
    """The roundest time t (nanoseconds since 1970) with low <= t < high."""
    start = pd.Timestamp(low)
    candidates = [pd.Timestamp(start.year + 1, 1, 1), start.normalize() + pd.offsets.MonthBegin(1)]
    candidates += [start.ceil(unit) for unit in ("D", "h", "min", "s", "ms", "us")]
    return next((t.value for t in candidates if low <= t.value < high), low)


def _round_duration(low: int, high: int) -> int:
    start = pd.Timedelta(low)
    return next((t.value for t in (start.ceil(u) for u in ("D", "h", "min", "s", "ms", "us"))
                 if low <= t.value < high), low)


def _edges(finite: np.ndarray, n_bins: int, threshold) -> list:
    """Thresholds at the quantiles of the values: each between two neighbouring distinct values."""
    distinct = np.unique(finite)
    edges = []
    for q in np.arange(1, n_bins) / n_bins:
        position = int(np.searchsorted(distinct, np.quantile(finite, q, method="inverted_cdf"), side="left"))
        if position + 1 < len(distinct):
            edge = threshold(distinct[position], distinct[position + 1])
            if not edges or edge > edges[-1]:
                edges.append(edge)
    return edges


def _bins(name: str, texts: list[str], below: list[np.ndarray], valid: np.ndarray,
          min_support: int) -> list[tuple[str, np.ndarray]]:
    """The bins between the thresholds, and the tails a single bin does not already give."""
    if not texts:
        return []
    made = []
    for i in range(len(texts) + 1):
        if i == 0:
            made.append((f"{name} <= {texts[0]}", below[0]))
        elif i == len(texts):
            made.append((f"{name} > {texts[-1]}", valid & ~below[-1]))
        else:
            made.append((f"{texts[i - 1]} < {name} <= {texts[i]}", below[i] & ~below[i - 1]))
    for i in range(1, len(texts) - 1):
        made.append((f"{name} <= {texts[i]}", below[i]))
    for i in range(1, len(texts) - 1):
        made.append((f"{name} > {texts[i]}", valid & ~below[i]))
    return [(text, mask) for text, mask in made if mask.sum() >= min_support]


def _threshold(low, high, dtype) -> float | int:
    """The number with the fewest decimals t such that low <= t < high once compared in ``dtype``."""
    if np.dtype(dtype).kind in "iu":
        return int(low)
    cast = np.dtype(dtype).type
    low, high = float(low), float(high)
    for places in range(-12, 18):
        scale = 10.0 ** places
        if not math.isfinite(low * scale):
            break
        t = math.ceil(low * scale) / scale
        t = round(t, places) if places > 0 else t
        if low <= float(cast(t)) < high:
            return t
    return low
