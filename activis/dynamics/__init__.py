"""Training dynamics: what happened to each instance and each layer across checkpoints.

- `data_map`: confidence, variability, correctness, forgetting events and Cartography's region per
  instance, from logits at several checkpoints (or `data_map_of` a store with checkpoints);
- `cka`, `cka_matrix`: centred kernel alignment between representations, layers x checkpoints
  (which layers settle first) or layers x layers of two models;
- subsets chosen by dynamics (`forgotten`, `hard_to_learn`, `ambiguous`, ...), usable wherever a
  `Subset` is;
- `aligned_projection`: one 2-D layout per checkpoint in which an instance moves only when its
  representation moves;
- `instance_quantities`: each instance's loss and gradient norm at the logits at one checkpoint.

Imports neither torch nor any widget; a store is any object with ``checkpoints`` and ``at(step)``.
"""

from __future__ import annotations

from .aligned import aligned_projection
from .cartography import data_map, data_map_of, regions
from .errors import DynamicsError
from .per_instance import instance_quantities
from .similarity import cka, cka_matrix
from .subsets import ambiguous, easy_to_learn, forgotten, hard_to_learn, never_learned, prediction_changed

__all__ = ["DynamicsError", "aligned_projection", "ambiguous", "cka", "cka_matrix", "data_map", "data_map_of",
           "easy_to_learn", "forgotten", "hard_to_learn", "instance_quantities", "never_learned", "prediction_changed",
           "regions"]
