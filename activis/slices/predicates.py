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
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import SliceError

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
    if column.isidentifier() and not keyword.iskeyword(column) and column not in _RESERVED:
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
    columns = list(columns)
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
    """Base predicates of the given columns over ``rows`` of the table, and notes on skipped columns."""
    found: list[Predicate] = []
    notes: list[str] = []
    for column in columns:
        values = table[column].iloc[rows]
        name = column_name(column)
        if pd.api.types.is_bool_dtype(values.dtype) or not pd.api.types.is_numeric_dtype(values.dtype):
            made = _categorical(values, name, min_support)
        elif values.nunique(dropna=True) <= n_bins:
            made = _categorical(values, name, min_support)
        else:
            made = _numeric(values, name, n_bins, min_support)
        if values.isna().sum() >= min_support:
            made.append((f"{name}.isna()", values.isna().to_numpy()))
        if not made:
            notes.append(f"column {column!r}: no value or bin holds {min_support} instances")
        found.extend(Predicate(column, text, np.ascontiguousarray(mask, dtype=bool)) for text, mask in made)
    return found, notes


def _categorical(values: pd.Series, name: str, min_support: int) -> list[tuple[str, np.ndarray]]:
    counts = values.value_counts(dropna=True)
    made = []
    for value, count in counts.iloc[:MAX_LEVELS].items():
        if count < min_support:
            break
        literal = _literal(value)
        if literal is not None:
            made.append((f"{name} == {literal}", (values == value).to_numpy(dtype=bool)))
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
    return None


def _numeric(values: pd.Series, name: str, n_bins: int, min_support: int) -> list[tuple[str, np.ndarray]]:
    data = values.to_numpy()
    finite = data[~pd.isna(data)] if data.dtype.kind == "f" else data
    distinct = np.unique(finite)
    edges = []
    for q in np.arange(1, n_bins) / n_bins:
        position = int(np.searchsorted(distinct, np.quantile(finite, q, method="inverted_cdf"), side="left"))
        if position + 1 < len(distinct):
            edge = _threshold(distinct[position], distinct[position + 1], data.dtype)
            if not edges or edge > edges[-1]:
                edges.append(edge)
    made = []
    texts = [repr(e) for e in edges]
    below = [data <= e for e in edges]
    for i in range(len(edges) + 1):  # the bins
        if i == 0:
            made.append((f"{name} <= {texts[0]}", below[0]))
        elif i == len(edges):
            made.append((f"{name} > {texts[-1]}", ~below[-1] & ~pd.isna(data)))
        else:
            made.append((f"{texts[i - 1]} < {name} <= {texts[i]}", below[i] & ~below[i - 1]))
    for i in range(1, len(edges) - 1):  # the tails a single bin does not already give
        made.append((f"{name} <= {texts[i]}", below[i]))
    for i in range(1, len(edges) - 1):
        made.append((f"{name} > {texts[i]}", ~below[i] & ~pd.isna(data)))
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
