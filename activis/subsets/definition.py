"""Subset definitions: queries, index sets and their and/or/not, as JSON-able dicts."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import textwrap
from collections.abc import Callable

import numpy as np

from .errors import SubsetError
from .expression import MAX_DEPTH, _Context, _Expression

MAX_PARTS = 1_000


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
    """Check a definition (one read from a file too) iteratively: bounded depth and size, never a RecursionError."""
    stack, count = [(definition, 1)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise SubsetError(f"A subset definition is nested too deeply: at most {MAX_DEPTH} levels of and/or/not.")
        kind = node.get("kind") if isinstance(node, dict) else None
        if kind == "query":
            _Expression(node.get("expr"))
        elif kind == "indices":
            idx = np.asarray(node.get("indices"))
            if idx.ndim != 1 or (idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0)):
                raise SubsetError("An indices subset needs a list of non-negative integers.")
        elif kind == "not":
            stack.append((node.get("part"), depth + 1))
        elif kind in ("and", "or"):
            parts = node.get("parts")
            if not isinstance(parts, list) or not parts:
                raise SubsetError(f"An {kind!r} subset needs a non-empty list of parts.")
            count += len(parts)
            if count > MAX_PARTS:
                raise SubsetError(f"A subset definition with {count - 1:,} parts; at most {MAX_PARTS:,} are allowed "
                                  "(combine fewer subsets, or save the combination as indices=).")
            stack.extend((part, depth + 1) for part in parts)
        else:
            raise SubsetError(f"Unknown subset definition kind {kind!r}; expected query, indices, and, or, not.")


def _coerce(value) -> Subset:
    if isinstance(value, Subset):
        return value
    if isinstance(value, str):
        return Subset.query(value)
    raise SubsetError(f"Cannot combine a Subset with {type(value).__name__}; use a Subset or a query string.")


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
