"""Slice discovery: find the groups of instances where the model fails, as reusable subsets.

`discover_slices` searches conjunctions of metadata predicates (SliceLine) and, given a layer,
error-concentrating groups in its activation space (an error-aware mixture, as Domino does, and
regions of high smoothed error), tests each slice against the whole set with a correction over
every slice its family could hold (fixed by the metadata, one family per number of predicates,
one for the groups), and returns them ranked with a `Subset` definition each. No torch, no widget.
"""

from .discover import Slice, SliceReport, discover_slices
from .errors import SliceError, SliceWarning

__all__ = ["Slice", "SliceError", "SliceReport", "SliceWarning", "discover_slices"]
