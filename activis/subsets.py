"""Subsets of a store's instances, their per-neuron statistics (S^T A), and neuron orderings.

A subset is a *definition* (a query over the instances table, an explicit index set, or an
and/or/not of other subsets) that is evaluated live against the store, so a query subset follows
the store as a capture appends to it. A subset made from a Python function or a mask is stored as
the index set it evaluated to (functions cannot be saved safely), together with the function's
source text for the record.

Definitions persist as JSON in the store's ``subsets`` section and come back when the store is
opened again; nothing is pickled, and query expressions are evaluated by a small interpreter that
only knows comparisons, arithmetic, a few pandas methods and ``score()``/``output()``, so an
expression read from someone else's store cannot run code.

Aggregation computes, for one layer and many subsets at once, each neuron's mean, standard
deviation and fraction of instances where it is active, in one chunked pass over the memory-mapped
activations. Instances are grouped by their membership pattern (which of the requested subsets
they belong to); a compiled kernel sums each pattern once per neuron, and the K x P pattern
membership matrix turns pattern sums into subset sums (S^T A without its K-fold cost). Results are
cached per (layer, definition, store state). This module imports neither torch nor a widget.
"""

from __future__ import annotations

import ast
import datetime
import difflib
import functools
import hashlib
import inspect
import json
import operator
import os
import re
import textwrap
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

FORMAT = "activis.subsets"
FORMAT_VERSION = 1
SUBSETS_FILE = "subsets.json"
STATS = ("mean", "active", "std")
DEFAULT_CHUNK_BYTES = 64 << 20
DEFAULT_CACHE_BYTES = 256 << 20
# when the requested subsets together hold at most this fraction of the store, their rows are
# read directly (a gather) instead of a pass over the whole layer
GATHER_FRACTION = 0.125
# rows whose mean is the per-neuron shift (see _Accumulator); rows per float32 partial sum
SHIFT_ROWS = 256
FLUSH_ROWS = 8192
# pattern accumulators may use the chunk budget or this much, whichever is larger; beyond it
# (very many distinct membership patterns) the pass multiplies the dense membership matrix instead
PATTERN_BYTES = 32 << 20
# optimal leaf ordering costs ~O(n^3); above this many neurons the plain dendrogram order is used
LEAF_ORDERING_LIMIT = 768
# above this many neurons, hierarchical clustering (quadratic memory) runs on k-means centroids
EXACT_CLUSTER_LIMIT = 4096


class SubsetError(ValueError):
    """A subset that cannot be defined or evaluated: bad expression, unknown column, bad indices."""


# --------------------------------------------------------------------------- expressions
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_SERIES_METHODS = {"isin", "between", "isna", "notna", "isnull", "notnull", "abs", "round"}
_STR_METHODS = {"contains", "startswith", "endswith", "match", "fullmatch", "len", "lower", "upper", "strip"}
_FUNCTIONS = {"abs", "score", "output"}
_BACKTICK = re.compile(r"`([^`]+)`")


class _Expression:
    """A parsed, checked query expression over the instances table.

    Parsing happens at definition time, so a syntax error or a forbidden construct is reported
    before anything is saved; names are resolved against the columns when evaluated.
    """

    def __init__(self, text: str):
        if not isinstance(text, str) or not text.strip():
            raise SubsetError("A subset expression must be a non-empty string, e.g. \"label == 3\".")
        self.text = text
        self.quoted: dict[str, str] = {}

        def quote(match):
            placeholder = f"_q{len(self.quoted)}_"
            self.quoted[placeholder] = match.group(1)
            return placeholder

        source = _BACKTICK.sub(quote, text.strip())
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise SubsetError(f"Cannot parse subset expression {text!r}: {exc.msg}"
                              f" (column {exc.offset}).") from None
        self.tree = tree.body
        self._check(self.tree)

    def _check(self, node: ast.AST) -> None:
        allowed = (ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Compare, ast.Name, ast.Constant, ast.List,
                   ast.Tuple, ast.Call, ast.keyword, ast.Load, ast.boolop, ast.unaryop, ast.operator,
                   ast.cmpop)
        if not isinstance(node, allowed) or isinstance(node, (ast.MatMult, ast.LShift, ast.RShift)):
            raise SubsetError(f"{type(node).__name__} is not allowed in a subset expression ({self.text!r}); "
                              "use comparisons, and/or/not, arithmetic, .isin(), .between(), .str.contains(), "
                              "score(k) or output(k).")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise SubsetError(f"Name {node.id!r} is not allowed in a subset expression.")
        if isinstance(node, ast.Call):
            self._check_call(node)
            for child in [*node.args, *node.keywords]:
                self._check(child)
            return
        for child in ast.iter_child_nodes(node):
            self._check(child)

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id not in _FUNCTIONS:
                raise SubsetError(f"Function {func.id!r} is not available in subset expressions; "
                                  f"available: {', '.join(sorted(_FUNCTIONS))}.")
            return
        if isinstance(func, ast.Attribute):
            target = func.value
            if isinstance(target, ast.Attribute) and target.attr == "str" and func.attr in _STR_METHODS:
                self._check(target.value)
                return
            if func.attr in _SERIES_METHODS:
                self._check(target)
                return
            raise SubsetError(f"Method .{func.attr}() is not available in subset expressions; available: "
                              f"{', '.join(sorted(_SERIES_METHODS))} and .str.{{{', '.join(sorted(_STR_METHODS))}}}.")
        raise SubsetError(f"Only named functions and column methods can be called in {self.text!r}.")

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, context: _Context) -> np.ndarray:
        try:
            value = self._condition(self.tree, context)
        except SubsetError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as exc:
            raise SubsetError(f"Cannot evaluate subset expression {self.text!r}: {exc}") from None
        if isinstance(value, bool):
            return np.full(context.n, value)
        return value.to_numpy(dtype=bool)

    def _eval(self, node, ctx: _Context):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._eval(e, ctx) for e in node.elts]
        if isinstance(node, ast.Name):
            return ctx.column(self.quoted.get(node.id, node.id), self.text)
        if isinstance(node, ast.BoolOp):
            values = [self._condition(v, ctx) for v in node.values]
            combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
            return functools.reduce(combine, values)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, (ast.Not, ast.Invert)):
                value = self._condition(node.operand, ctx)
                return (not value) if isinstance(value, bool) else ~value
            value = self._eval(node.operand, ctx)
            return -value if isinstance(node.op, ast.USub) else +value
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, ctx), self._eval(node.right, ctx)
            _check_arithmetic(node.op, left, right, self.text)
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.Compare):
            result = None
            left = self._eval(node.left, ctx)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, ctx)
                if isinstance(op, (ast.In, ast.NotIn)):
                    part = _membership(left, right, self.text)
                    part = ~part if isinstance(op, ast.NotIn) else part
                else:
                    part = _COMPARE[type(op)](left, right)
                result = part if result is None else result & part
                left = right
            return result
        if isinstance(node, ast.Call):
            return self._call(node, ctx)
        raise SubsetError(f"Cannot evaluate {ast.unparse(node)!r} in {self.text!r}.")

    def _condition(self, node, ctx):
        return _as_condition(self._eval(node, ctx), ast.unparse(node), self.text)

    def _call(self, node: ast.Call, ctx: _Context):
        args = [self._eval(a, ctx) for a in node.args]
        kwargs = {k.arg: self._eval(k.value, ctx) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "abs":
                return abs(*args)
            if len(args) != 1 or kwargs:
                raise SubsetError(f"{func.id}() takes one class (index or name), e.g. {func.id}(3), in {self.text!r}.")
            return ctx.class_column(func.id, args[0], self.text)
        if isinstance(func.value, ast.Attribute) and func.value.attr == "str":
            series = self._eval(func.value.value, ctx)
            return getattr(_series(series, ctx).str, func.attr)(*args, **kwargs)
        series = self._eval(func.value, ctx)
        return getattr(_series(series, ctx), func.attr)(*args, **kwargs)


def _check_arithmetic(op: ast.operator, left, right, text: str) -> None:
    """Refuse constant arithmetic that could exhaust the machine (``9**9**9``, ``'a' * 10**9``)."""
    sized = (str, bytes, list)
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
        raise SubsetError(f"Exponents above 64 are not allowed in subset expressions ({text!r}).")
    if isinstance(op, ast.Mult) and (isinstance(left, sized) or isinstance(right, sized)):
        raise SubsetError(f"Repeating text or lists is not allowed in subset expressions ({text!r}).")


def _series(value, ctx: _Context) -> pd.Series:
    return value if isinstance(value, pd.Series) else pd.Series(value, index=ctx.index)


def _membership(left, right, text):
    if not isinstance(right, list):
        raise SubsetError(f"'in' needs a list of values on its right, e.g. label in [3, 5], in {text!r}.")
    if isinstance(left, pd.Series):
        return left.isin(right)
    return left in right


def _as_condition(value, what: str, text: str):
    """A boolean per instance (or a plain bool); anything else is a clear error."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, pd.Series):
        if value.dtype == bool:
            return value
        if value.dtype == object or str(value.dtype) == "boolean":
            filled = value.astype(object).where(value.notna(), False)
            if filled.map(lambda v: isinstance(v, (bool, np.bool_))).all():
                return filled.astype(bool)
    raise SubsetError(f"{what!r} in {text!r} is not a condition (True/False per instance); "
                      f"compare it, e.g. {what} > 0.")


class _Context:
    """What an expression can see: the instances table and, on demand, scores and outputs."""

    def __init__(self, store):
        self.store = store
        self.table = store.instances
        self.n = len(self.table)
        self.index = self.table.index
        self._class_arrays: dict[str, np.ndarray] = {}

    def column(self, name: str, text: str) -> pd.Series:
        if name == "index":
            return pd.Series(np.arange(self.n), index=self.index)
        if name in self.table.columns:
            return self.table[name]
        columns = ["index", *map(str, self.table.columns)]
        close = difflib.get_close_matches(name, columns, n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise SubsetError(f"Unknown column {name!r} in subset expression {text!r}.{hint} "
                          f"Columns: {', '.join(columns)}; functions: score(class), output(class). "
                          "Quote names with spaces in backticks: `my column`.")

    def class_column(self, kind: str, cls, text: str) -> pd.Series:
        k = _class_index(cls, self.store.class_names, self._n_classes())
        if kind not in self._class_arrays:
            self._class_arrays[kind] = np.asarray(self.store.scores if kind == "score" else self.store.outputs)
        return pd.Series(self._class_arrays[kind][:, k], index=self.index)

    def _n_classes(self) -> int:
        return int(self.store.outputs.shape[1])


def _class_index(cls, class_names: Sequence[str], n_classes: int) -> int:
    """A class given by index or by name, checked."""
    if isinstance(cls, (int, np.integer)) and not isinstance(cls, bool):
        if 0 <= int(cls) < n_classes:
            return int(cls)
        raise SubsetError(f"Class {cls} is out of range: this store has {n_classes} classes (0..{n_classes - 1}).")
    if isinstance(cls, str) and cls in class_names:
        return list(class_names).index(cls)
    names = ", ".join(map(repr, class_names)) if class_names else f"indices 0..{n_classes - 1}"
    raise SubsetError(f"Unknown class {cls!r}; classes: {names}.")


# --------------------------------------------------------------------------- definitions
class Subset:
    """The definition of a set of instances; evaluate it with `Subsets.mask`.

    Combine with ``&``, ``|`` and ``~`` (a string on either side is read as a query). Equal
    definitions have equal ``key``s, which is what aggregation results are cached under.
    """

    __slots__ = ("definition", "name", "_key")

    def __init__(self, definition: dict, name: str | None = None):
        _check_definition(definition)  # fail now (e.g. on a damaged file), not when the matrix is drawn
        self.definition = definition
        self.name = name
        self._key = None

    @classmethod
    def query(cls, expression: str) -> Subset:
        """Instances for which the expression over the instances table holds, e.g. ``"label == 9"``."""
        return cls({"kind": "query", "expr": expression})

    @classmethod
    def from_indices(cls, indices, source: str | None = None) -> Subset:
        """A fixed set of instances, e.g. curated examples or the result of a function."""
        idx = np.asarray(indices)
        if idx.size and idx.dtype.kind not in "iu":
            raise SubsetError(f"Subset indices must be integers, got {idx.dtype}.")
        if idx.ndim != 1:
            raise SubsetError(f"Subset indices must be one-dimensional, got shape {idx.shape}.")
        if idx.size and idx.min() < 0:
            raise SubsetError(f"Subset indices must be non-negative, got {int(idx.min())}.")
        definition = {"kind": "indices", "indices": np.unique(idx).astype(np.int64).tolist()}
        if source:
            definition["source"] = source
        return cls(definition)

    @property
    def kind(self) -> str:
        return self.definition["kind"]

    @property
    def key(self) -> str:
        """A digest of the definition: equal definitions share cached results."""
        if self._key is None:
            text = json.dumps(_strip_names(self.definition), sort_keys=True, separators=(",", ":"))
            self._key = hashlib.sha1(text.encode()).hexdigest()
        return self._key

    def describe(self) -> str:
        return _describe(self.definition)

    def _part(self) -> dict:
        return {**self.definition, "name": self.name} if self.name else self.definition

    def _combine(self, other, kind: str) -> Subset:
        other = _coerce(other)
        parts = []
        for part in (self._part(), other._part()):
            same = part.get("kind") == kind and "name" not in part
            parts.extend(part["parts"] if same else [part])
        return Subset({"kind": kind, "parts": parts})

    def __and__(self, other) -> Subset:
        return self._combine(other, "and")

    def __or__(self, other) -> Subset:
        return self._combine(other, "or")

    def __rand__(self, other) -> Subset:
        return _coerce(other)._combine(self, "and")

    def __ror__(self, other) -> Subset:
        return _coerce(other)._combine(self, "or")

    def __invert__(self) -> Subset:
        if self.kind == "not" and not self.name:
            inner = self.definition["part"]
            return Subset({k: v for k, v in inner.items() if k != "name"}, inner.get("name"))
        return Subset({"kind": "not", "part": self._part()})

    def __eq__(self, other) -> bool:
        return isinstance(other, Subset) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        label = f"{self.name!r}: " if self.name else ""
        return f"<Subset {label}{self.describe()}>"


def _check_definition(definition) -> None:
    kind = definition.get("kind") if isinstance(definition, dict) else None
    if kind == "query":
        _Expression(definition.get("expr"))
    elif kind == "indices":
        idx = np.asarray(definition.get("indices"))
        if idx.ndim != 1 or (idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0)):
            raise SubsetError("An indices subset needs a list of non-negative integers.")
    elif kind == "not":
        _check_definition(definition.get("part"))
    elif kind in ("and", "or"):
        parts = definition.get("parts")
        if not isinstance(parts, list) or not parts:
            raise SubsetError(f"An {kind!r} subset needs a non-empty list of parts.")
        for part in parts:
            _check_definition(part)
    else:
        raise SubsetError(f"Unknown subset definition kind {kind!r}; expected query, indices, and, or, not.")


def _coerce(value) -> Subset:
    if isinstance(value, Subset):
        return value
    if isinstance(value, str):
        return Subset.query(value)
    raise TypeError(f"Cannot combine a Subset with {type(value).__name__}; use a Subset or a query string.")


def _strip_names(definition: dict) -> dict:
    out = {k: v for k, v in definition.items() if k not in ("name", "source")}
    if "parts" in out:
        out["parts"] = [_strip_names(p) for p in out["parts"]]
    if "part" in out:
        out["part"] = _strip_names(out["part"])
    return out


def _describe(definition: dict, nested: bool = False) -> str:
    if nested and definition.get("name"):
        return definition["name"]
    kind = definition["kind"]
    if kind == "query":
        text = definition["expr"]
        return f"({text})" if nested else text
    if kind == "indices":
        n = len(definition["indices"])
        if definition.get("source"):
            return f"function {definition['source']} (evaluated: {n:,} instances)"
        return f"{n:,} chosen instance{'s' if n != 1 else ''}"
    if kind == "not":
        return "~" + _describe(definition["part"], nested=True)
    joined = f" {'&' if kind == 'and' else '|'} ".join(_describe(p, nested=True) for p in definition["parts"])
    return f"({joined})" if nested else joined


def _evaluate(definition: dict, context: _Context) -> np.ndarray:
    kind = definition["kind"]
    if kind == "query":
        return _Expression(definition["expr"]).evaluate(context)
    if kind == "indices":
        mask = np.zeros(context.n, bool)
        idx = np.asarray(definition["indices"], dtype=np.int64)
        mask[idx[idx < context.n]] = True  # a store rewritten smaller drops the missing instances
        return mask
    if kind == "not":
        return ~_evaluate(definition["part"], context)
    masks = [_evaluate(p, context) for p in definition["parts"]]
    return np.logical_and.reduce(masks) if kind == "and" else np.logical_or.reduce(masks)


def _function_source(func: Callable) -> str:
    """The function's text for the record: a lambda's own expression, or the whole def."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return getattr(func, "__qualname__", repr(func))
    if getattr(func, "__name__", "") == "<lambda>":
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a lambda inside a multi-line call: inspect gives a fragment
            return source.strip()
        for node in ast.walk(tree):
            if isinstance(node, ast.Lambda):
                return ast.get_source_segment(source, node)
    return source.strip()


# --------------------------------------------------------------------------- aggregation
@dataclass(frozen=True)
class Aggregate:
    """Per-neuron statistics of K rows (subsets) at one layer; arrays are K x neurons float32.

    ``mean`` is the subset's mean activation, ``active`` the fraction of its instances with the
    neuron above ``threshold``, ``std`` the population standard deviation. An empty subset's row
    is NaN. Stats that were not asked for are None.
    """

    layer: str
    names: list[str]
    sizes: np.ndarray
    threshold: float
    mean: np.ndarray | None = None
    active: np.ndarray | None = None
    std: np.ndarray | None = None

    def __getitem__(self, stat: str) -> np.ndarray:
        value = getattr(self, stat, None) if stat in STATS else None
        if value is None:
            done = [s for s in STATS if getattr(self, s) is not None]
            raise KeyError(f"Statistic {stat!r} was not computed; this aggregate has {', '.join(done)}.")
        return value

    @property
    def n_neurons(self) -> int:
        return int(next(getattr(self, s) for s in STATS if getattr(self, s) is not None).shape[1])

    def to_frame(self, stat: str = "mean") -> pd.DataFrame:
        """Rows named by subset, one column per neuron."""
        return pd.DataFrame(self[stat], index=pd.Index(self.names, name="subset"))


@functools.cache
def _kernel():
    """Compile (once, cached on disk) the pattern-sum kernel; numba is imported only here."""
    import numba

    def jit(func):
        try:
            return numba.njit(cache=True, nogil=True, fastmath=True)(func)
        except RuntimeError:  # no writable cache location: compile in each process instead
            return numba.njit(nogil=True, fastmath=True)(func)

    @jit
    def pattern_sums(block, pattern, threshold, moments, flush_rows, shifts, seen, totals, squares, active,
                     part_totals, part_squares, part_active, touched):
        # Per pattern, sums of d = x - (the pattern's first row): small d keep float32 exact enough
        # (one instance alone has d = 0). float32 partials are flushed into float64 every
        # flush_rows rows: twice the SIMD width and half the cache traffic of float64, no drift.
        n_rows, n_neurons = block.shape
        for start in range(0, n_rows, flush_rows):
            for i in range(start, min(n_rows, start + flush_rows)):
                p = pattern[i]
                if p < 0:
                    continue
                touched[p] = True
                values = block[i]
                shift = shifts[p]
                if not seen[p]:
                    seen[p] = True
                    for j in range(n_neurons):
                        shift[j] = values[j]
                part_total = part_totals[p]
                if moments:
                    part_square = part_squares[p]
                    part_act = part_active[p]
                    for j in range(n_neurons):
                        x = values[j] - shift[j]
                        part_total[j] += x
                        part_square[j] += x * x
                        part_act[j] += np.float32(1.0) if values[j] > threshold else np.float32(0.0)
                else:
                    for j in range(n_neurons):
                        part_total[j] += values[j] - shift[j]
            for p in range(touched.shape[0]):
                if not touched[p]:
                    continue
                touched[p] = False
                for j in range(n_neurons):
                    totals[p, j] += part_totals[p, j]
                    part_totals[p, j] = 0.0
                if moments:
                    for j in range(n_neurons):
                        squares[p, j] += part_squares[p, j]
                        active[p, j] += part_active[p, j]
                        part_squares[p, j] = 0.0
                        part_active[p, j] = 0.0

    return pattern_sums


def _membership_patterns(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group instances by which subsets they belong to.

    Returns (pattern id per instance, -1 for instances in none; K x P membership of patterns).
    Each instance's membership is packed into 64-bit words and hashed (pandas.factorize: linear
    time, ids in order of first appearance), words combined pairwise for K > 64.
    """
    k, n = masks.shape
    codes = None
    for lo in range(0, k, 64):
        word = np.zeros(n, np.uint64)
        for bit, row in enumerate(masks[lo:lo + 64]):
            word |= row.view(np.uint8).astype(np.uint64) << np.uint64(bit)
        word_codes, word_values = pd.factorize(word)
        codes = word_codes if codes is None else pd.factorize(codes * len(word_values) + word_codes)[0]
    # ids appear in increasing order, so a pattern's first instance is where the running max grows
    first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
    members = masks[:, first]  # K x P
    pattern = codes.astype(np.intp)
    empty = ~members.any(axis=0)
    if empty.any():  # the "in none of them" pattern is skipped by the kernel
        keep = np.flatnonzero(~empty)
        remap = np.full(members.shape[1], -1, np.intp)
        remap[keep] = np.arange(len(keep))
        pattern = remap[pattern]
        members = members[:, keep]
    return pattern, members


class _Accumulator:
    """Float64 sums of (x - shift), of their squares and of active counts for K rows.

    ``shift`` is a per-neuron estimate of the mean; summing shifted values keeps the variance
    (E[d^2] - E[d]^2) from cancelling when a neuron's mean is large next to its spread.
    """

    def __init__(self, k: int, shift: np.ndarray, moments: bool):
        self.shift = shift
        self.totals = np.zeros((k, len(shift)))
        self.squares = np.zeros((k, len(shift))) if moments else None
        self.active = np.zeros((k, len(shift))) if moments else None

    def add_rows(self, row: int, block: np.ndarray, threshold: float) -> None:
        raw = np.asarray(block, dtype=np.float64)
        centred = raw - self.shift
        self.totals[row] += centred.sum(axis=0)
        if self.squares is not None:
            self.squares[row] += np.einsum("ij,ij->j", centred, centred)
            self.active[row] += np.count_nonzero(raw > threshold, axis=0)

    def finish(self, sizes: np.ndarray, stats: Sequence[str]) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            count = sizes.astype(np.float64)[:, None]
            centred_mean = self.totals / count
            out = {"mean": centred_mean + self.shift}
            if self.squares is not None:
                out["std"] = np.sqrt(np.maximum(self.squares / count - centred_mean ** 2, 0.0))
                out["active"] = self.active / count
        return {s: out[s].astype(np.float32) for s in stats}


def aggregate_masks(activations: np.ndarray, masks: np.ndarray, *, stats: Sequence[str] = STATS,
                    threshold: float = 0.0, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict[str, np.ndarray]:
    """Per-neuron statistics of K boolean masks over an instances x neurons array.

    Reads ``activations`` (typically a memory map) in chunks of about ``chunk_bytes``: heap use
    stays near ``chunk_bytes`` plus the K x neurons results whatever the array's size. When the
    subsets are small together their rows are gathered; otherwise all share one pass.
    """
    stats = _check_stats(stats)
    masks = np.asarray(masks, dtype=bool)
    n, n_neurons = activations.shape
    if masks.ndim != 2 or masks.shape[1] != n:
        raise ValueError(f"masks must be K x {n} booleans, got shape {masks.shape}")
    moments = any(s != "mean" for s in stats)
    shift = np.asarray(activations[:SHIFT_ROWS], dtype=np.float64).mean(axis=0) if n else np.zeros(n_neurons)
    acc = _Accumulator(len(masks), np.nan_to_num(shift), moments)
    sizes = masks.sum(axis=1)
    if sizes.sum() <= GATHER_FRACTION * n:
        rows_per_chunk = max(1, int(chunk_bytes) // (n_neurons * 8))
        for k in np.flatnonzero(sizes):
            index = np.flatnonzero(masks[k])
            for lo in range(0, len(index), rows_per_chunk):
                acc.add_rows(k, activations[index[lo:lo + rows_per_chunk]], threshold)
    elif n:
        nonempty = np.flatnonzero(sizes)
        _full_pass(activations, masks[nonempty], nonempty, acc, threshold, chunk_bytes)
    return acc.finish(sizes, stats)


def _full_pass(activations, masks, rows, acc: _Accumulator, threshold: float, chunk_bytes: int) -> None:
    """One chunked pass over the array for the subsets in ``rows``: pattern kernel or dense S^T A."""
    n, n_neurons = activations.shape
    pattern, members = _membership_patterns(masks)
    moments = acc.squares is not None
    n_patterns = members.shape[1]
    rows_per_chunk = max(1, int(chunk_bytes) // (n_neurons * 4))
    convert = activations.dtype != np.float32
    buffer = np.empty((min(rows_per_chunk, n), n_neurons), np.float32) if convert else None

    # pattern accumulators: float64 totals + float32 partials, 1 or 3 of each
    use_kernel = n_patterns * n_neurons * 12 * (3 if moments else 1) <= max(chunk_bytes, PATTERN_BYTES)
    if use_kernel:
        kernel = _kernel()
        shape = (n_patterns, n_neurons) if moments else (1, 1)
        shifts = np.zeros((n_patterns, n_neurons), np.float32)
        seen = np.zeros(n_patterns, np.bool_)
        totals = np.zeros((n_patterns, n_neurons))
        squares, active = np.zeros(shape), np.zeros(shape)
        part_totals = np.zeros((n_patterns, n_neurons), np.float32)
        part_squares, part_active = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        touched = np.zeros(n_patterns, np.bool_)
    for lo in range(0, n, rows_per_chunk):
        hi = min(n, lo + rows_per_chunk)
        chunk_pattern = pattern[lo:hi]
        if not (chunk_pattern >= 0).any():
            continue  # nobody here belongs to a requested subset: do not even read these rows
        block = activations[lo:hi]
        if convert:
            np.copyto(buffer[: hi - lo], block, casting="unsafe")  # float16 -> float32 before any math
            block = buffer[: hi - lo]
        block = np.asarray(block).view()
        block.flags.writeable = False  # one compiled signature for memory maps and buffers alike
        if use_kernel:
            kernel(block, chunk_pattern, np.float32(threshold), moments, FLUSH_ROWS, shifts, seen, totals,
                   squares, active, part_totals, part_squares, part_active, touched)
        else:  # float64: this path has no per-pattern shift to keep float32 sums of squares honest
            membership = masks[:, lo:hi].astype(np.float64)
            centred = block - acc.shift
            acc.totals[rows] += membership @ centred
            if moments:
                acc.squares[rows] += membership @ np.square(centred)
                acc.active[rows] += membership @ (block > threshold)
    if use_kernel:
        # re-centre each pattern's sums on the common shift (the parallel-variance identity), in
        # float64, then add patterns into subsets: K x P membership times P x N pattern sums
        counts = np.bincount(pattern[pattern >= 0], minlength=n_patterns).astype(np.float64)[:, None]
        offset = shifts - acc.shift
        member_matrix = members.astype(np.float64)
        acc.totals[rows] += member_matrix @ (totals + counts * offset)
        if moments:
            acc.squares[rows] += member_matrix @ (squares + 2 * offset * totals + counts * offset ** 2)
            acc.active[rows] += member_matrix @ active


def _check_stats(stats) -> tuple[str, ...]:
    stats = (stats,) if isinstance(stats, str) else tuple(stats)
    bad = [s for s in stats if s not in STATS]
    if bad or not stats:
        raise ValueError(f"Unknown statistic(s) {bad}; choose from {', '.join(STATS)}.")
    return stats


def _layer_signature(activations) -> tuple:
    """What identifies the bytes behind a layer: a store overwritten in place gets a new signature."""
    filename = getattr(activations, "filename", None)
    if filename:
        st = os.stat(filename)
        return (str(filename), st.st_size, st.st_mtime_ns)
    return ("memory", id(activations))


# --------------------------------------------------------------------------- the collection
def checked_indices(indices, n: int) -> np.ndarray:
    """Instance indices as int64, or a clear error for booleans, non-integers or out-of-range values."""
    idx = np.asarray(indices if not isinstance(indices, (set, frozenset)) else sorted(indices))
    if idx.dtype == bool:
        raise SubsetError("indices= got booleans; pass them as mask= instead.")
    if idx.size and idx.dtype.kind not in "iu":
        raise SubsetError(f"indices= must be integers, got {idx.dtype}.")
    idx = idx.astype(np.int64).ravel()
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise SubsetError(f"Indices out of range for a store of {n} instances: {bad[:10].tolist()}"
                          f"{' ...' if bad.size > 10 else ''}.")
    return idx


class Subsets:
    """The named subsets of one store: define, list, persist, evaluate and aggregate them.

    ``Subsets(store)`` reloads the subsets saved in the store. Every change is written to
    ``<store>/subsets/subsets.json`` at once (atomically), so another notebook opening the store
    sees it. Re-adding a name replaces its definition (re-running a cell just works).
    """

    def __init__(self, store, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.store = store
        self.chunk_bytes = int(chunk_bytes)
        self.cache_bytes = int(cache_bytes)
        self._definitions: dict[str, Subset] = {}
        self._created: dict[str, str] = {}
        # definition key -> (instances table it was evaluated on, mask, digest of the mask)
        self._masks: OrderedDict[str, tuple[pd.DataFrame, np.ndarray, str]] = OrderedDict()
        self._masks_bytes = 0
        self._rows: OrderedDict[tuple, dict] = OrderedDict()
        self._rows_bytes = 0
        self._callbacks: list[Callable[[Subsets], None]] = []
        self._persist_warned = False
        self.reload()

    # ------------------------------------------------------------- persistence
    @property
    def path(self):
        """The JSON file the definitions live in (None for a store this process cannot write to)."""
        try:
            return self.store.section("subsets") / SUBSETS_FILE
        except OSError:
            return None

    def reload(self) -> Subsets:
        """Re-read the saved definitions (another notebook may have changed them)."""
        path = self.path
        definitions, created = {}, {}
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                if data.get("format") != FORMAT:
                    raise ValueError("format tag missing")
                if int(data.get("version", 0)) > FORMAT_VERSION:
                    raise ValueError(f"version {data['version']} is newer than this activis reads")
                for entry in data["subsets"]:
                    definitions[entry["name"]] = Subset(entry["definition"], entry["name"])
                    created[entry["name"]] = entry.get("created", "")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SubsetError(f"Cannot read the saved subsets in {path}: {exc}. The file was left as it "
                                  "is; move it away to start with no subsets.") from None
        self._definitions, self._created = definitions, created
        self._notify()
        return self

    def _save(self) -> None:
        path = self.path
        if path is None:
            if not self._persist_warned:
                warnings.warn(f"Store {self.store.path} is not writable: subsets are kept in memory only.",
                              stacklevel=3)
                self._persist_warned = True
            return
        data = {"format": FORMAT, "version": FORMAT_VERSION,
                "subsets": [{"name": name, "definition": s.definition, "created": self._created.get(name, "")}
                            for name, s in self._definitions.items()]}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)

    # ------------------------------------------------------------- observers
    def observe(self, callback: Callable[[Subsets], None]) -> None:
        """Call ``callback(subsets)`` after every change of the definitions (views use this)."""
        self._callbacks.append(callback)

    def unobserve(self, callback: Callable[[Subsets], None]) -> None:
        """Stop calling ``callback`` (nothing happens if it was not observing)."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def _notify(self) -> None:
        for callback in list(self._callbacks):
            callback(self)

    # ------------------------------------------------------------- mapping
    @property
    def names(self) -> list[str]:
        return list(self._definitions)

    def __len__(self) -> int:
        return len(self._definitions)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._definitions))

    def __contains__(self, name) -> bool:
        return name in self._definitions

    def __getitem__(self, name: str) -> Subset:
        try:
            return self._definitions[name]
        except (KeyError, TypeError):
            close = difflib.get_close_matches(str(name), self.names, n=3)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise KeyError(f"No subset named {name!r}.{hint} Subsets: {', '.join(map(repr, self.names)) or 'none'}.")\
                from None

    def __repr__(self) -> str:
        return f"<Subsets of {self.store.path}: {len(self)} subsets>"

    # ------------------------------------------------------------- defining
    def add(self, name: str, definition: str | Subset | None = None, *, indices=None, mask=None,
            where: Callable[[pd.DataFrame], object] | None = None) -> Subset:
        """Define (or redefine) a named subset; it is checked against the store before it is saved.

        Give exactly one of: a query ``definition`` over the instances table (``"age > 20 and
        topic == 'sports'"``, ``"label == 9 and pred == 4"``, ``"score('cat') > 0.8"``) or a
        `Subset` (e.g. ``subsets["a"] & ~subsets["b"]``); ``indices``; a boolean ``mask``; or
        ``where``, a function of the instances table returning a mask or indices. ``mask``,
        ``indices`` and ``where`` are saved as the index set they give now.
        """
        if not isinstance(name, str) or not name.strip():
            raise SubsetError(f"A subset name must be a non-empty string, got {name!r}.")
        given = [x is not None for x in (definition, indices, mask, where)]
        if sum(given) != 1:
            raise SubsetError("Give exactly one of: a query or Subset, indices=, mask= or where=.")
        n = self.store.n_instances
        if definition is not None:
            subset = _coerce(definition)
        elif indices is not None:
            subset = Subset.from_indices(checked_indices(indices, n))
        elif mask is not None:
            subset = Subset.from_indices(np.flatnonzero(self._checked_mask(mask, n, "mask")))
        else:
            subset = self._from_function(where, n)
        subset = self._define(name, subset)
        self._save()
        self._notify()
        return subset

    def _define(self, name: str, subset: Subset) -> Subset:
        subset = Subset(subset.definition, name)
        self.mask(subset)  # evaluate now: a bad column or type is an error before anything is saved
        self._definitions[name] = subset
        self._created[name] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return subset

    def _define_many(self, definitions: dict[str, str]) -> list[str]:
        wanted = {name: Subset.query(expression) for name, expression in definitions.items()}
        if all(name in self._definitions and self._definitions[name] == s for name, s in wanted.items()):
            return list(wanted)  # already defined as asked: no rewrite, no notification
        for name, subset in wanted.items():
            self._define(name, subset)
        self._save()
        self._notify()
        return list(wanted)

    def _from_function(self, where, n: int) -> Subset:
        if not callable(where):
            raise SubsetError(f"where= must be a function of the instances table, got {type(where).__name__}.")
        result = where(self.store.instances.copy())
        values = np.asarray(result.to_numpy() if isinstance(result, pd.Series) else result)
        if values.dtype == bool:
            index = np.flatnonzero(self._checked_mask(values, n, "where= function"))
        else:
            index = checked_indices(values, n)
        return Subset.from_indices(index, source=_function_source(where))

    @staticmethod
    def _checked_mask(mask, n: int, what: str) -> np.ndarray:
        values = np.asarray(mask)
        if values.dtype != bool or values.shape != (n,):
            raise SubsetError(f"{what} must be {n} True/False values (one per instance), "
                              f"got {values.dtype} of shape {values.shape}.")
        return values

    def remove(self, name: str) -> None:
        self[name]  # noqa: B018 - a clear KeyError for an unknown name
        del self._definitions[name]
        self._created.pop(name, None)
        self._save()
        self._notify()

    def _classes(self, classes) -> list[tuple[int, str]]:
        names = self.store.class_names
        n_classes = int(self.store.outputs.shape[1])
        picked = range(n_classes) if classes is None else [_class_index(c, names, n_classes) for c in classes]
        return [(k, names[k] if k < len(names) else str(k)) for k in picked]

    def by_class(self, classes=None, *, prefix: str = "true ") -> list[str]:
        """One subset per true class (the matrix's default rows), named ``"true <class>"``."""
        return self._define_many({f"{prefix}{name}": f"label == {k}" for k, name in self._classes(classes)})

    def by_prediction(self, classes=None, *, prefix: str = "pred ") -> list[str]:
        """One subset per predicted class, named ``"pred <class>"``."""
        return self._define_many({f"{prefix}{name}": f"pred == {k}" for k, name in self._classes(classes)})

    def confusion(self, true, pred, name: str | None = None) -> Subset:
        """Instances of class ``true`` predicted as ``pred`` (``"true 9, pred 4"``)."""
        (t, t_name), = self._classes([true])
        (p, p_name), = self._classes([pred])
        return self.add(name or f"true {t_name}, pred {p_name}", f"label == {t} and pred == {p}")

    def misclassified(self, name: str = "misclassified") -> Subset:
        return self.add(name, "not correct")

    def correct(self, name: str = "correctly classified") -> Subset:
        return self.add(name, "correct")

    def by_score(self, name: str, low: float | None = None, high: float | None = None, cls=None) -> Subset:
        """Instances whose score is in [low, high): the top confidence, or class ``cls``'s probability."""
        if low is None and high is None:
            raise SubsetError("by_score needs low=, high= or both.")
        if cls is None:
            value = "confidence"
        else:
            (k, _), = self._classes([cls])
            value = f"score({k})"
        parts = ([f"{value} >= {float(low)!r}"] if low is not None else []) + \
                ([f"{value} < {float(high)!r}"] if high is not None else [])
        return self.add(name, " and ".join(parts))

    # ------------------------------------------------------------- evaluating
    def _resolve(self, item) -> Subset:
        if isinstance(item, Subset):
            return item
        if isinstance(item, str):
            return self[item]
        raise TypeError(f"Expected a subset name or a Subset, got {type(item).__name__}.")

    def mask(self, item: str | Subset) -> np.ndarray:
        """True for the instances in the subset (read-only; cached per definition and store state)."""
        return self._membership(self._resolve(item))[1]

    def _membership(self, subset: Subset) -> tuple[pd.DataFrame, np.ndarray, str]:
        table = self.store.instances
        cached = self._masks.get(subset.key)
        if cached is not None and cached[0] is table:  # the same table object: the same store state
            self._masks.move_to_end(subset.key)
            return cached
        mask = _evaluate(subset.definition, _Context(self.store))
        mask.flags.writeable = False
        digest = hashlib.sha1(np.packbits(mask).tobytes()).hexdigest() + f":{len(mask)}"
        old = self._masks.pop(subset.key, None)
        self._masks_bytes -= old[1].nbytes if old else 0
        self._masks[subset.key] = entry = (table, mask, digest)
        self._masks_bytes += mask.nbytes
        while self._masks_bytes > self.cache_bytes and len(self._masks) > 1:
            _, (_, dropped, _) = self._masks.popitem(last=False)
            self._masks_bytes -= dropped.nbytes
        return entry

    def indices(self, item: str | Subset) -> np.ndarray:
        return np.flatnonzero(self.mask(item))

    def size(self, item: str | Subset) -> int:
        return int(np.count_nonzero(self.mask(item)))

    def table(self) -> pd.DataFrame:
        """One row per subset: name, kind, definition, size and fraction of the store."""
        n = self.store.n_instances
        rows = []
        for name, subset in self._definitions.items():
            size = self.size(subset)
            rows.append({"name": name, "kind": subset.kind, "definition": subset.describe(), "size": size,
                         "fraction": size / n if n else 0.0})
        return pd.DataFrame(rows, columns=["name", "kind", "definition", "size", "fraction"])

    # ------------------------------------------------------------- aggregating
    def aggregate(self, layer: str, items: Iterable[str | Subset] | None = None, *,
                  stats: Sequence[str] = STATS, threshold: float = 0.0) -> Aggregate:
        """Per-neuron mean, fraction active (> ``threshold``) and std of many subsets at one layer.

        ``items`` are subset names or `Subset` objects (default: every named subset). One chunked
        pass over the layer's memory map serves all rows not already cached. A row is cached under
        the members it covers (a digest of its mask), the layer file's size and mtime and the
        threshold: a redefined subset, or a store that grew or was rewritten, is recomputed.
        """
        stats = _check_stats(stats)
        subsets = [self._resolve(item) for item in (self.names if items is None else items)]
        activations = self.store.activations(layer)
        n, n_neurons = activations.shape
        state = (layer, n, _layer_signature(activations), float(threshold))
        memberships = [self._membership(s) for s in subsets]
        keys = [(state, digest) for _, _, digest in memberships]
        found = {}
        for key in keys:
            entry = self._rows.get(key)
            if entry is not None and set(stats) <= set(entry["stats"]):
                found[key] = entry
                self._rows.move_to_end(key)
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            mask_of = {key: mask for key, (_, mask, _) in zip(keys, memberships)}
            masks = np.stack([mask_of[key] for key in missing])
            computed = aggregate_masks(activations, masks, stats=stats, threshold=threshold,
                                       chunk_bytes=self.chunk_bytes)
            for i, key in enumerate(missing):
                found[key] = self._remember(key, int(masks[i].sum()), {s: computed[s][i].copy() for s in stats})
        entries = [found[key] for key in keys]
        result = {s: np.stack([e["stats"][s] for e in entries]) if entries else np.zeros((0, n_neurons), np.float32)
                  for s in stats}
        names = [s.name or s.describe() for s in subsets]
        sizes = np.array([e["size"] for e in entries], dtype=np.int64)
        return Aggregate(layer=layer, names=names, sizes=sizes, threshold=float(threshold), **result)

    def _remember(self, key: tuple, size: int, stats: dict[str, np.ndarray]) -> dict:
        old = self._rows.pop(key, None)
        if old:
            self._rows_bytes -= old["bytes"]
            stats = {**old["stats"], **stats}
        entry = {"size": size, "stats": stats, "bytes": sum(v.nbytes for v in stats.values())}
        self._rows[key] = entry
        self._rows_bytes += entry["bytes"]
        while self._rows_bytes > self.cache_bytes and len(self._rows) > 1:
            _, dropped = self._rows.popitem(last=False)
            self._rows_bytes -= dropped["bytes"]
        return entry

    def clear_cache(self, masks: bool = True) -> None:
        """Forget aggregated rows (and, unless ``masks=False``, evaluated memberships)."""
        if masks:
            self._masks.clear()
            self._masks_bytes = 0
        self._rows.clear()
        self._rows_bytes = 0


# --------------------------------------------------------------------------- neuron ordering
def sort_neurons(values: np.ndarray, descending: bool = True) -> np.ndarray:
    """Neuron order by one row's values: largest first (or smallest), NaN last, ties by index."""
    values = np.asarray(values, dtype=np.float64)
    key = -values if descending else values.copy()
    key[np.isnan(key)] = np.inf
    return np.lexsort((np.arange(len(values)), key)).astype(np.int32)


def difference(values: np.ndarray, reference: int) -> np.ndarray:
    """Every row minus the reference row: what differs from, say, the class a row is confused with."""
    values = np.asarray(values)
    return values - values[reference][None, :]


def cluster_neurons(values: np.ndarray, *, metric: str = "euclidean", method: str = "average",
                    seed: int = 0) -> np.ndarray:
    """Neuron order that puts neurons with similar profiles across the rows side by side.

    Hierarchical clustering of the neurons' column profiles, leaves in dendrogram order (with
    optimal leaf ordering for up to 768 neurons). Rows that are entirely NaN (empty subsets) are
    ignored. Beyond 4,096 neurons the dendrogram is built over k-means centroids and each cluster's
    neurons follow their centroid, ordered by distance to it.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be rows x neurons, got shape {values.shape}")
    profiles = values[~np.isnan(values).all(axis=1)].T  # neurons x rows
    n = profiles.shape[0]
    if n < 3 or profiles.shape[1] == 0:
        return np.arange(n, dtype=np.int32)
    profiles = np.nan_to_num(profiles, nan=0.0)
    if n <= EXACT_CLUSTER_LIMIT:
        return _seriate(profiles, metric, method).astype(np.int32)
    from sklearn.cluster import MiniBatchKMeans

    n_clusters = EXACT_CLUSTER_LIMIT // 16
    km = MiniBatchKMeans(n_clusters=n_clusters, random_state=seed, n_init=3).fit(profiles)
    centroid_order = _seriate(km.cluster_centers_, metric, method)
    distance = np.linalg.norm(profiles - km.cluster_centers_[km.labels_], axis=1)
    rank = np.empty(n_clusters, np.int64)
    rank[centroid_order] = np.arange(n_clusters)
    return np.lexsort((np.arange(n), distance, rank[km.labels_])).astype(np.int32)


def _seriate(points: np.ndarray, metric: str, method: str) -> np.ndarray:
    from scipy.cluster import hierarchy
    from scipy.spatial.distance import pdist

    distances = pdist(points, metric=metric)
    distances[~np.isfinite(distances)] = np.nanmax(distances, initial=1.0) if np.isfinite(distances).any() else 1.0
    tree = hierarchy.linkage(distances, method=method)
    if len(points) <= LEAF_ORDERING_LIMIT:
        tree = hierarchy.optimal_leaf_ordering(tree, distances)
    return hierarchy.leaves_list(tree)
