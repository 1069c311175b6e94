"""The one error class of the views, and the checks every view makes of what it is handed.

A view refuses bad input where it is given (a wrong object, an unknown layer, an instance or
neuron out of range, a value a trait cannot hold) with a `ViewError` that names the problem and
the valid choices, before it changes anything.
"""

from __future__ import annotations

import difflib
import math

import numpy as np
import traitlets


class ViewError(traitlets.TraitError, ValueError, KeyError, IndexError, TypeError):
    """Bad input to a view: the message says what was wrong and what is valid.

    Also the builtin error each check replaced (a TraitError for a trait's value, a KeyError for an
    unknown name, an IndexError for an index out of range, a TypeError for an object of the wrong
    type, a ValueError for the rest), so code that caught those before still does.
    """

    __str__ = Exception.__str__  # the message as written, not quoted as KeyError would


LISTED = 40  # a graph has thousands of nodes: the message lists this many and counts the rest


def unknown(problem: str, value, choices, valid: str) -> ViewError:
    """The error for a ``value`` that is not one of ``choices``: the problem, close matches, then the choices."""
    return ViewError(f"{problem}.{did_you_mean(value, choices)} {valid}: {listing(choices)}.")


def did_you_mean(value, choices) -> str:
    close = difflib.get_close_matches(value, [str(c) for c in choices], n=3) if isinstance(value, str) else []
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


def listing(choices) -> str:
    choices = [str(c) for c in choices]
    more = f" … ({len(choices) - LISTED} more)" if len(choices) > LISTED else ""
    return (", ".join(choices[:LISTED]) or "none") + more


def check_type(view: str, value, expected: type, hint: str):
    """``value`` when it is an ``expected``; else an error saying what the view shows and how to get one."""
    if not isinstance(value, expected):
        raise ViewError(f"{view} shows {hint}, not {type(value).__name__} {_short(value)}.")
    return value


def check_store(view: str, store):
    """An `ActivationStore`, or an error saying how to open one."""
    from ..store import ActivationStore

    return check_type(view, store, ActivationStore, "an ActivationStore (activis.open_store(path))")


def check_same_instances(view: str, current, store):
    """Another store of the same instances (a checkpoint of it: ``store.at(step)``), for a view's `set_store`."""
    store = check_store(view, store)
    if store.n_instances != current.n_instances:
        raise ViewError(f"{view}.set_store needs a store of the same {current.n_instances:,} instances (a checkpoint: "
                        f"store.at(step)), not one of {store.n_instances:,}.")
    return store


def check_layer(store, layer) -> str:
    """The store's name of ``layer`` (given by name or by the graph node it was captured at), or an
    error listing the captured layers."""
    if isinstance(layer, str) and layer not in store.layers:
        by_node = [name for name in store.layers if store.manifest["layers"][name].get("node") == layer]
        layer = by_node[0] if len(by_node) == 1 else layer
    if not isinstance(layer, str) or layer not in store.layers:
        raise unknown(f"Layer {layer!r} is not in the store", layer, store.layers, "The captured layers")
    return layer


def check_index(index, n: int, what: str = "instance", holder: str = "the store") -> int:
    """An index in ``0..n-1`` as an int; booleans, text and floats are refused by name."""
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise ViewError(f"{what.capitalize()} must be an integer index (0..{n - 1}), not {_short(index)}.")
    if not 0 <= int(index) < n:
        raise ViewError(f"{what.capitalize()} {int(index)} is out of range: {holder} holds {n} {what}s "
                        f"(0..{n - 1}).")
    return int(index)


def check_neuron(store, layer: str, neuron) -> int:
    """A neuron index of ``layer``, or an error giving the layer's range."""
    n = int(store.layer_spec(check_layer(store, layer)).neurons)
    return check_index(neuron, n, "neuron", f"layer {layer!r}")


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_step_range(value, *, whole: bool = False) -> list[float]:
    """A view's ``step_range``: two finite steps, sorted (rounded to whole steps with ``whole``), or []
    for all steps. NaN is refused rather than kept: no step compares with it, so it would filter everything."""
    steps = list(value)
    if len(steps) not in (0, 2) or not all(math.isfinite(v) for v in steps):
        raise ViewError(f"step_range is [first, last] (two finite steps, in either order) or [] for all steps, "
                        f"not {steps}.")
    return [float(v) for v in sorted(round(v) if whole else v for v in steps)]
