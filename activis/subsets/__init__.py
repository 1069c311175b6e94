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
cached per (layer, definition, store state). This package imports neither torch nor a widget.
"""

from __future__ import annotations

from .aggregation import STATS, Aggregate, aggregate_masks
from .collection import Subsets, checked_indices
from .definition import Subset
from .errors import SubsetError
from .ordering import cluster_neurons, difference, sort_neurons
from .running import RunningAggregate

__all__ = ["STATS", "Aggregate", "RunningAggregate", "Subset", "SubsetError", "Subsets", "aggregate_masks",
           "checked_indices",
           "cluster_neurons", "difference", "sort_neurons"]
