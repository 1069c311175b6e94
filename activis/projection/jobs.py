"""`ProjectionJob` (one layout in a background thread) and `Projector` (one running job at a time)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from collections.abc import Callable

import numpy as np

from .cache import _Cache, _digest, _fingerprint
from .errors import ProjectionCancelled, ProjectionError, _Cancelled
from .params import _resolve_params
from .pca import _as_layout, _pca, _Rows
from .tsne import _tsne_in_child
from .umap import (
    FIT_ROWS,
    PLACE_NEIGHBOURS,
    _fuzzy_graph,
    _initial_layout,
    _nearest_neighbors,
    _place_by_neighbours,
    _umap_layout,
)

ENGINE_VERSION = 1  # part of every cache key: bump when a layout algorithm changes
_NOTIFY_EVERY_S = 0.1


def _single_threaded_blas():
    """One BLAS thread while a job runs: the job is background work, and the other core stays free.

    Measured on a shared 2-core machine: OpenBLAS's two spinning threads made the covariance of
    100,000 x 512 activations take 1.4-1.7 s instead of 0.3 s with one thread whenever other
    processes competed for the cores (and they do, in a notebook: the kernel, the browser).
    The limit is process-wide while it holds (OpenBLAS has one setting), so the notebook's own
    numpy calls run single-threaded during a projection too.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _check_store(store) -> None:
    missing = [name for name in ("activations", "n_instances", "layers", "section") if not hasattr(store, name)]
    if missing:
        raise ProjectionError(f"A projection needs an activation store (activis.open_store(path)), "
                              f"got {type(store).__name__}.")


def instance_rows(instances, n_total: int) -> np.ndarray | None:
    """Validated instance indices (int64, order kept) from indices or a boolean mask; None = all."""
    if instances is None:
        return None
    arr = np.asarray(instances)
    if arr.dtype == bool:
        if arr.shape != (n_total,):
            raise ProjectionError(f"A boolean instances mask must have one entry per instance ({n_total}), "
                             f"not shape {arr.shape}.")
        arr = np.flatnonzero(arr)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ProjectionError("instances must be a 1-D array of instance indices or a boolean mask.")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n_total):
        raise ProjectionError(f"instances must lie in [0, {n_total}); got {arr.min()}..{arr.max()}.")
    if len(np.unique(arr)) != len(arr):
        raise ProjectionError("instances contains repeated indices; each instance can be placed once.")
    return arr


class ProjectionJob:
    """One 2D layout of a layer's instances, computed in the background or loaded from the cache.

    ``status`` is pending, running, done, failed or cancelled; ``stage`` and ``progress`` (0-1) say
    how far it is; ``preview`` holds the PCA layout as soon as a UMAP or t-SNE job has it;
    ``positions`` (n x 2 float32, read-only, rows in the order of ``instances``) the result.
    ``on_change(callback)`` calls ``callback(job)`` from the worker thread, at most ten times a
    second plus once for every new status, stage or preview.
    """

    def __init__(self, store, layer: str, method: str = "umap", *, instances=None, **params):
        _check_store(store)
        self.store = store
        self.layer = layer
        self.method = method
        self._activations = store.activations(layer)  # a clear KeyError listing the layers
        self.instances = instance_rows(instances, self._activations.shape[0])
        self.n = len(self.instances) if self.instances is not None else self._activations.shape[0]
        if self.n == 0:
            raise ProjectionError(f"Layer {layer!r} has no instances to project yet.")
        self.params = _resolve_params(method, params, self.n)
        self._fingerprint = _fingerprint(self._activations)
        # a UMAP of more rows than FIT_ROWS is fitted on a sample: its own cache key
        self.fit_rows = FIT_ROWS if method == "umap" and self.n > FIT_ROWS else None
        self.key = self._key(method, {**self.params, **({"fit_rows": self.fit_rows} if self.fit_rows else {})})
        self.status = "pending"
        self.stage = ""
        self.progress = 0.0
        self.preview: np.ndarray | None = None
        self.positions: np.ndarray | None = None
        self.info: dict = {}
        self.error: BaseException | None = None
        self.from_cache = False
        self.elapsed: float | None = None
        self._cache = _Cache(store)
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._cancel = threading.Event()
        self._observers: list[Callable[[ProjectionJob], None]] = []
        self._last_notify = 0.0
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen | None = None

    def _key(self, method: str, params: dict) -> str:
        description = {"engine": ENGINE_VERSION, "layer": self.layer, "method": method, "params": params,
                       "data": self._fingerprint, "instances": _digest(self.instances)}
        return hashlib.sha1(json.dumps(description, sort_keys=True).encode()).hexdigest()[:24]

    def _name(self, method: str, key: str) -> str:
        return f"{method}-{key}"

    # ------------------------------------------------------------------ public
    @property
    def done(self) -> bool:
        return self.status in ("done", "failed", "cancelled")

    def start(self) -> ProjectionJob:
        """Load the layout from the cache, or compute it in a background thread; returns self."""
        with self._lock:  # against a concurrent cancel(): a job starts once, or not at all
            if self.status != "pending":
                return self
            cached = self._cache.load(self._name(self.method, self.key), (self.n, 2))
            if cached is not None:
                self.info = self._cache.meta(self._name(self.method, self.key)).get("info", {})
                self.from_cache = True
                self.positions, self.progress, self.stage = cached, 1.0, "done"
                self.status, self.elapsed = "done", 0.0
                self._done.set()
            else:
                if self.method != "pca":
                    self.preview = self._cache.load(self._name("pca", self._key("pca", {})), (self.n, 2))
                self.status = "running"
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"activis-{self.method}-{self.layer}")
                self._thread.start()
        self._notify(force=True)
        return self

    def cancel(self) -> None:
        """Stop the job at its next checkpoint (a t-SNE child process is terminated at once)."""
        self._cancel.set()
        with self._lock:
            child = self._child
            if self.status == "pending":
                self._finish("cancelled")
        if child is not None and child.poll() is None:
            child.terminate()

    def wait(self, timeout: float | None = None) -> np.ndarray:
        """Block until the layout is ready and return it (raises if it failed or was cancelled)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.wait(0.2):  # short waits keep Ctrl-C / kernel interrupt working
            if self.status == "pending":
                raise ProjectionError("This job was never started; call job.start() or use project().")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self!r} did not finish within {timeout} s.")
        if self.status == "failed":
            raise ProjectionError(f"{self.method.upper()} of layer {self.layer!r} failed: {self.error}") \
                from self.error
        if self.status == "cancelled":
            raise ProjectionCancelled(f"{self.method.upper()} of layer {self.layer!r} was cancelled.")
        return self.positions

    def on_change(self, callback: Callable[[ProjectionJob], None]) -> Callable[[], None]:
        """Call ``callback(job)`` on progress (once, however often it is added); returns an unsubscriber."""
        with self._lock:
            if callback not in self._observers:
                self._observers.append(callback)

        def unsubscribe():
            with self._lock:
                if callback in self._observers:
                    self._observers.remove(callback)
        return unsubscribe

    def __repr__(self) -> str:
        state = self.status
        if self.status == "running":
            state += f" · {self.stage} {self.progress:.0%}"
        elif self.status == "done":
            state += " (cached)" if self.from_cache else f" in {self.elapsed:.1f} s"
        return f"<ProjectionJob {self.method} of {self.layer!r} ({self.n:,} instances): {state}>"

    # ------------------------------------------------------------------ worker
    def _tick(self) -> None:
        if self._cancel.is_set():
            raise _Cancelled

    def _attach_child(self, child: subprocess.Popen) -> None:
        with self._lock:
            self._child = child
        if self._cancel.is_set():
            child.terminate()

    def _stage(self, name: str, low: float, high: float) -> Callable[[float], None]:
        def report(fraction: float) -> None:
            self._tick()
            with self._lock:
                new_stage = self.stage != name
                self.stage = name
                self.progress = max(self.progress, low + (high - low) * min(1.0, max(0.0, fraction)))
            self._notify(force=new_stage)
        return report

    def _notify(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last_notify < _NOTIFY_EVERY_S:
                return
            self._last_notify = now
            observers = list(self._observers)
        for callback in observers:
            try:
                callback(self)
            except Exception:  # a broken view must not kill the computation
                import logging

                logging.getLogger(__name__).exception("projection observer failed")

    def _finish(self, status: str, positions: np.ndarray | None = None, error: BaseException | None = None,
                elapsed: float | None = None) -> None:
        with self._lock:
            if positions is not None:
                self.positions = positions
                self.progress = 1.0
                self.stage = "done"
            self.status, self.error, self.elapsed = status, error, elapsed
            self._done.set()
        self._notify(force=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        self._notify(force=True)
        try:
            with _single_threaded_blas():
                layout = getattr(self, f"_compute_{self.method}")()
            layout = np.ascontiguousarray(layout, dtype=np.float32)
            layout.flags.writeable = False
            self._tick()
            self._save(self.method, self.key, self.params, layout, time.perf_counter() - t0)
            self._finish("done", positions=layout, elapsed=time.perf_counter() - t0)
        except _Cancelled:
            self._finish("cancelled", elapsed=time.perf_counter() - t0)
        except Exception as exc:
            if self._cancel.is_set():  # a terminated t-SNE child, for example
                self._finish("cancelled", elapsed=time.perf_counter() - t0)
            else:
                self._finish("failed", error=exc, elapsed=time.perf_counter() - t0)

    def _save(self, method: str, key: str, params: dict, layout: np.ndarray, seconds: float) -> None:
        meta = {"layer": self.layer, "method": method, "params": params, "n": self.n,
                "instances": _digest(self.instances), "data": self._fingerprint, "engine": ENGINE_VERSION,
                "seconds": round(seconds, 3), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "info": self.info if method == self.method else {}}
        self._cache.save(self._name(method, key), layout, meta)

    def _rows(self) -> _Rows:
        return _Rows(self._activations, self.instances, self._tick)

    def _pca_scores(self, k: int, seed: int, high: float) -> np.ndarray:
        """PCA scores; publishes (and caches) their first two columns as the preview."""
        t0 = time.perf_counter()
        scores, ratio = _pca(self._rows(), k, seed, self._stage("PCA", 0.0, high))
        if self.method == "pca":
            self.info = {"explained_variance": [round(float(r), 6) for r in ratio[:2]]}
        if self.method != "pca" and self.preview is None:
            preview = _as_layout(scores)
            preview.flags.writeable = False
            self._save("pca", self._key("pca", {}), {}, preview, time.perf_counter() - t0)
            with self._lock:
                self.preview = preview
            self._notify(force=True)
        return scores

    def _compute_pca(self) -> np.ndarray:
        return _as_layout(self._pca_scores(2, 0, 1.0))

    def _compute_umap(self) -> np.ndarray:
        if self.fit_rows:
            return self._compute_umap_on_sample()
        p = self.params
        knn_params = {"n_neighbors": p["n_neighbors"], "pca_dims": p["pca_dims"], "random_state": p["random_state"]}
        knn_name = self._name("knn", self._key("knn", knn_params))
        shape = (self.n, p["n_neighbors"])
        idx = self._cache.load(knn_name, shape)
        dist = self._cache.load(f"{knn_name}-dist", shape) if idx is not None else None
        if dist is None:  # neighbours are kept: changing min_dist or n_epochs then skips this part
            scores = self._pca_scores(p["pca_dims"], p["random_state"], 0.15)
            idx, dist = _nearest_neighbors(scores, p["n_neighbors"], p["random_state"],
                                           self._stage("neighbours", 0.15, 0.45))
            self._cache.save(knn_name, idx.astype(np.int32), {"layer": self.layer, "method": "knn",
                                                              "params": knn_params, "n": self.n})
            self._cache.save(f"{knn_name}-dist", dist.astype(np.float32))
        if self.preview is None:
            self._pca_scores(2, p["random_state"], 0.15)
        self._stage("fuzzy graph", 0.45, 0.5)(0.0)
        graph = _fuzzy_graph(idx.astype(np.int64), dist.astype(np.float32), self.n)
        init = _initial_layout(self.preview, p["random_state"])
        return _umap_layout(graph, init, p, self._stage("layout", 0.5, 1.0))

    def _compute_umap_on_sample(self) -> np.ndarray:
        """UMAP of a random sample of `FIT_ROWS` rows; every other row placed by its nearest sampled
        neighbours in PCA space (the PCA of every row is the preview, and the space they meet in)."""
        p = self.params
        scores = self._pca_scores(p["pca_dims"], p["random_state"], 0.15)
        if self.preview is None:
            self._pca_scores(2, p["random_state"], 0.15)
        rng = np.random.default_rng(p["random_state"])
        sample = np.sort(rng.choice(self.n, self.fit_rows, replace=False))
        sample_z = np.ascontiguousarray(scores[sample])
        idx, dist = _nearest_neighbors(sample_z, p["n_neighbors"], p["random_state"],
                                       self._stage("neighbours", 0.15, 0.35))
        self._stage("fuzzy graph", 0.35, 0.4)(0.0)
        graph = _fuzzy_graph(idx.astype(np.int64), dist.astype(np.float32), len(sample))
        init = _initial_layout(self.preview[sample], p["random_state"])
        fitted = _umap_layout(graph, init, p, self._stage("layout", 0.4, 0.8))
        rest = np.setdiff1d(np.arange(self.n), sample, assume_unique=True)
        layout = np.empty((self.n, 2), np.float32)
        layout[sample] = fitted
        layout[rest] = _place_by_neighbours(sample_z, fitted, scores[rest], PLACE_NEIGHBOURS,
                                            self._stage("placing the other rows", 0.8, 1.0))
        self.info = {"fitted_on": int(self.fit_rows), "placed": int(len(rest))}
        return layout

    def _compute_tsne(self) -> np.ndarray:
        p = self.params
        scores = self._pca_scores(p["pca_dims"], p["random_state"], 0.1)
        first = self.preview[:, 0].astype(np.float64)
        scale = first.std() or 1.0
        init = (self.preview / scale * 1e-4).astype(np.float32)  # scikit-learn's scaling of a PCA init
        child_params = {k: p[k] for k in ("perplexity", "max_iter", "early_exaggeration", "random_state")}
        return _tsne_in_child(scores, init, child_params, self, self._stage("t-SNE", 0.1, 1.0))


def project(store, layer: str, method: str = "umap", *, instances=None, **params) -> ProjectionJob:
    """Start a 2D layout of ``layer``'s activations; returns the running (or cached) job.

    ``method`` is "pca" (seconds even for a million instances), "umap" (default; parameters
    n_neighbors=15, min_dist=0.1, spread=1.0, n_epochs=auto, pca_dims=50, random_state=0) or
    "tsne" (perplexity=30, max_iter=1000, early_exaggeration=12, pca_dims=50, random_state=0).
    ``instances`` (indices or a boolean mask) restricts the map to a subset. ``job.wait()``
    returns the n x 2 positions.
    """
    return ProjectionJob(store, layer, method, instances=instances, **params).start()


class Projector:
    """The projection behind one view: a new request cancels the one still running.

    Requesting what is already running (or done) returns that job instead of starting again.
    """

    def __init__(self, store):
        _check_store(store)
        self.store = store
        self._current: ProjectionJob | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> ProjectionJob | None:
        return self._current

    def request(self, layer: str, method: str = "umap", *, instances=None,
                on_change: Callable[[ProjectionJob], None] | None = None, **params) -> ProjectionJob:
        """The job for this layout, started; ``on_change`` is subscribed before it starts."""
        job = ProjectionJob(self.store, layer, method, instances=instances, **params)
        with self._lock:
            current = self._current
            if current is not None and current.key == job.key and current.status in ("running", "done"):
                job = current
            else:
                if current is not None and not current.done:
                    current.cancel()
                self._current = job
        if on_change is not None:
            job.on_change(on_change)
        return job.start()

    def cancel(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current.cancel()
