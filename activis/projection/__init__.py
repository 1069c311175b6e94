"""2D maps of a layer's instance activations: PCA, UMAP and t-SNE, in the background, cached.

``project(store, layer, method)`` returns a `ProjectionJob` at once; the layout is computed in a
background thread (t-SNE in a child process, so that it can be stopped and never holds the
kernel's GIL) and reported through ``job.progress`` / ``job.on_change``. UMAP and t-SNE jobs publish
the PCA layout as ``job.preview`` within seconds, so a view has something true to show while the
slow layout runs. `Projector` keeps one running job and cancels it when a newer request arrives.

Layouts are cached in the store's ``projections`` section as ``.npy`` + ``.json`` (never pickled),
keyed by layer, method, parameters, instance set and a fingerprint of the activations, so they
are reused across sessions and dropped when the store is rewritten.

Why UMAP is implemented here rather than called through ``umap.UMAP``: a fresh process spends
40-90 s compiling umap-learn's and pynndescent's numba code before it fits anything, and numba's
cache does not keep most of it. `umap.py` runs the same algorithm (umap-learn 0.5: the same
fuzzy simplicial set, the same a/b curve, the same negative-sampling SGD with the same learning
rate schedule) from parts that cost no compile: neighbours from PCA + exact or random-projection-
forest search in numpy, the fuzzy graph in vectorised numpy, and only the SGD in numba, compiled
once per machine and kept in numba's on-disk cache (``cache=True``: next to this file, or in the
user cache dir when the package directory is read-only; ``NUMBA_CACHE_DIR`` overrides both, as
numba documents). ``benchmarks/bench_projection.py`` compares time and layout quality with
``umap.UMAP().fit_transform``.

This package imports neither torch nor any widget, nor anything else from activis: a store is any
object with ``activations(layer)``, ``n_instances``, ``layers`` and ``section(name)``.
"""

from __future__ import annotations

from .cache import clear_projections, list_projections
from .errors import ProjectionCancelled, ProjectionError
from .jobs import ProjectionJob, Projector, instance_rows, project
from .params import METHODS

__all__ = ["METHODS", "ProjectionCancelled", "ProjectionError", "ProjectionJob", "Projector", "clear_projections",
           "instance_rows", "list_projections", "project"]
