"""The projection engine: PCA / UMAP / t-SNE jobs, their cache, supersession and layout quality."""

import threading
import time
import warnings

import numpy as np
import pytest
import scipy.sparse
from sklearn.neighbors import NearestNeighbors

from activis import projection as P
from activis.projection import (
    ProjectionCancelled,
    ProjectionError,
    Projector,
    clear_projections,
    list_projections,
    project,
)
from activis.projection import jobs as jobs_module
from activis.projection import pca as pca_module
from activis.projection import umap as umap_module
from activis.store import LayerSpec, StoreWriter, open_store, write_store


def blobs(n, d=32, classes=5, spread=4.0, seed=0):
    """Clustered activations: class centres far apart relative to the noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.standard_normal((classes, d))[y] * spread + rng.standard_normal((n, d))
    return np.maximum(x, 0).astype(np.float32), y


def make_store(path, x, y, **layers):
    logits = np.eye(int(y.max()) + 1)[y] * 3.0
    return write_store(path, {"fc": x, **layers}, labels=y, outputs=logits, overwrite=True)


def label_agreement(positions, y, k=10):
    """Fraction of each point's k nearest 2D neighbours that share its label."""
    idx = NearestNeighbors(n_neighbors=k + 1).fit(positions).kneighbors(positions)[1][:, 1:]
    return float((y[idx] == y[:, None]).mean())


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    x, y = blobs(1200)
    store = make_store(tmp_path_factory.mktemp("clustered") / "store", x, y,
                       relu=np.maximum(x[:, :8] - 1, 0).astype(np.float16))
    return store, x, y


# ------------------------------------------------------------------------------ PCA
def test_pca_matches_scikit_learn_and_streams_float16(tmp_path):
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3000, 40)) @ rng.standard_normal((40, 40)) + 50).astype(np.float16)
    store = write_store(tmp_path / "s", {"h": x}, labels=np.zeros(3000, int), outputs=np.zeros((3000, 2)))
    monkey_chunk = pca_module._CHUNK_BYTES
    try:
        pca_module._CHUNK_BYTES = 40 * 4 * 256  # force many chunks
        job = project(store, "h", "pca")
        positions = job.wait(60)
    finally:
        pca_module._CHUNK_BYTES = monkey_chunk
    reference = PCA(2).fit(x.astype(np.float64))
    expected = reference.transform(x.astype(np.float64))
    for c in range(2):
        corr = np.corrcoef(positions[:, c], expected[:, c])[0, 1]
        assert abs(corr) > 0.9999
    assert np.allclose(job.info["explained_variance"], reference.explained_variance_ratio_, rtol=1e-3)
    assert positions.dtype == np.float32 and positions.shape == (3000, 2)
    assert not positions.flags.writeable  # shared with views and the cache: read-only


def test_instances_subset_keeps_order_and_mask_equals_indices(clustered):
    store, x, _ = clustered
    rows = np.array([50, 3, 999, 10, 7] + list(range(100, 200)))
    subset = project(store, "fc", "pca", instances=rows).wait(60)
    mask = np.zeros(store.n_instances, bool)
    mask[rows] = True
    masked = project(store, "fc", "pca", instances=mask)
    assert masked.wait(60).shape == (len(rows), 2)
    # same set in another order: another key (rows follow the order given)
    assert masked.key != project(store, "fc", "pca", instances=rows).key
    # positions follow the given order: row i of the layout is instance rows[i]
    direct = project(store, "fc", "pca", instances=np.sort(rows)).wait(60)
    order = np.argsort(rows)
    assert np.allclose(subset[order], direct, atol=1e-4)


# ------------------------------------------------------------------------------ neighbours and UMAP parts
def test_exact_neighbours_match_scikit_learn():
    x, _ = blobs(700, d=12)
    idx, dist = umap_module._nearest_neighbors(x, 10, 0, lambda f: None)
    ref_dist, ref_idx = NearestNeighbors(n_neighbors=10).fit(x).kneighbors(x)
    assert (idx[:, 0] == np.arange(700)).all() and np.allclose(dist[:, 0], 0)
    assert np.allclose(dist, ref_dist, atol=1e-3)
    assert np.mean([len(set(a) & set(b)) for a, b in zip(idx, ref_idx, strict=True)]) > 9.9


def test_forest_neighbours_have_high_recall(monkeypatch):
    monkeypatch.setattr(umap_module, "_EXACT_KNN_MAX", 500)
    monkeypatch.setattr(umap_module, "_FOREST_LEAF", 128)
    x, _ = blobs(4000, d=16, spread=1.0)
    idx, dist = umap_module._nearest_neighbors(x, 15, 0, lambda f: None)
    ref = NearestNeighbors(n_neighbors=15).fit(x).kneighbors(x)[1]
    recall = np.mean([len(set(a) & set(b)) for a, b in zip(idx, ref, strict=True)]) / 15
    assert recall > 0.95
    assert (np.diff(dist, axis=1) >= -1e-5).all()  # sorted
    assert (idx >= 0).all()


def test_fuzzy_graph_and_sgd_match_umap_learn():
    """The same numbers as umap-learn's own functions (run uncompiled, so no numba compile)."""
    umap_ = pytest.importorskip("umap.umap_")
    layouts = pytest.importorskip("umap.layouts")
    x, _ = blobs(150, d=8)
    idx, dist = umap_module._nearest_neighbors(x, 8, 0, lambda f: None)
    dist = dist.astype(np.float32)
    sigma, rho = umap_module._smooth_knn_dist(dist, 8)
    ref_sigma, ref_rho = umap_.smooth_knn_dist.py_func(dist, 8.0)
    assert np.allclose(rho, ref_rho) and np.allclose(sigma, ref_sigma, rtol=1e-3)
    graph = umap_module._fuzzy_graph(idx, dist, 150).tocsr()
    rows, cols, vals, _ = umap_.compute_membership_strengths.py_func(idx, dist, ref_sigma, ref_rho)
    local = scipy.sparse.coo_matrix((vals, (rows, cols)), shape=(150, 150)).tocsr()
    ref_graph = local + local.T - local.multiply(local.T)  # fuzzy_simplicial_set's union
    assert abs(graph - ref_graph).max() < 1e-4
    assert np.allclose(umap_module._ab_params(1.0, 0.1), umap_.find_ab_params(1.0, 0.1))

    # SGD epochs from the same start and random state give the same layout (two epochs: the first
    # has no negative samples; later, float rounding differences grow chaotically, as in umap itself)
    coo = graph.tocoo()
    head, tail = coo.row.astype(np.int32), coo.col.astype(np.int32)
    eps = coo.data.max() / coo.data.astype(np.float64)
    a, b = umap_.find_ab_params(1.0, 0.1)
    start = umap_module._initial_layout(np.random.default_rng(0).standard_normal((150, 2)), 0)
    states = np.random.default_rng(0).integers(-(2**31), 2**31 - 1, size=(150, 3), dtype=np.int64)
    ours, theirs = start.copy(), start.copy()
    umap_module._sgd_kernel()(ours, head, tail, eps, eps.copy(), eps / 5, eps / 5, states.copy(), a, b, 1.0, 1.0,
                              50, 0, 2)
    their_states = states.copy()
    next_sample, next_negative = eps.copy(), eps / 5
    alpha = 1.0
    for epoch in range(2):
        layouts._optimize_layout_euclidean_single_epoch(
            theirs, theirs, head, tail, 150, eps, a, b, their_states, 1.0, 2, True, alpha, eps / 5,
            next_negative, next_sample, epoch, False, *([np.zeros(1, np.float32)] * 2), 0, 0, 0, 0,
            np.zeros(1, np.float32), np.zeros(1, np.float32), 0)
        alpha = 1.0 * (1.0 - epoch / 50)
    assert np.allclose(ours, theirs, atol=1e-3)
    assert not np.allclose(ours, start)


# ------------------------------------------------------------------------------ quality
def test_umap_and_tsne_separate_clusters_better_than_chance(clustered):
    store, _, y = clustered
    umap_job = project(store, "fc", "umap", n_epochs=150)
    tsne_job = project(store, "fc", "tsne", max_iter=300, perplexity=20)
    umap_positions = umap_job.wait(180)
    assert label_agreement(umap_positions, y) > 0.97
    assert np.isfinite(umap_positions).all()
    assert label_agreement(tsne_job.wait(300), y) > 0.95
    assert label_agreement(umap_job.preview, y) > 0.8  # the PCA shown first is already a fair map


def test_degenerate_layers_give_finite_layouts(tmp_path):
    n = 60
    y = np.arange(n) % 3
    store = write_store(tmp_path / "s", {"dead": np.zeros((n, 5), np.float32),
                                         "one": np.linspace(0, 1, n, dtype=np.float32)[:, None]},
                        labels=y, outputs=np.eye(3)[y])
    for layer in ("dead", "one"):
        for method in ("pca", "umap"):
            positions = project(store, layer, method, n_epochs=20).wait(60) if method == "umap" else \
                project(store, layer, method).wait(60)
            assert positions.shape == (n, 2) and np.isfinite(positions).all()
    with pytest.warns(UserWarning, match="n_neighbors"):
        tiny = project(store, "one", "umap", instances=[0, 1, 2, 3], n_epochs=10)
    assert tiny.wait(60).shape == (4, 2)


# ------------------------------------------------------------------------------ cache
def test_cache_reuse_across_sessions_and_invalidation(tmp_path):
    x, y = blobs(500, d=16)
    path = tmp_path / "store"
    store = make_store(path, x, y)
    first = project(store, "fc", "umap", n_epochs=30)
    positions = first.wait(120).copy()
    assert not first.from_cache

    again = project(open_store(path), "fc", "umap", n_epochs=30)  # a new session: reopened store
    assert again.status == "done" and again.from_cache and np.array_equal(again.positions, positions)
    assert again.wait(1) is again.positions

    # other parameters: computed, but the neighbours are reused (no "neighbours" stage)
    stages = []
    other = P.ProjectionJob(store, "fc", "umap", n_epochs=30, min_dist=0.5)
    other.on_change(lambda job: stages.append(job.stage))
    other.start().wait(120)
    assert not other.from_cache and "neighbours" not in stages and "layout" in stages
    fresh = project(store, "fc", "umap", n_epochs=30, n_neighbors=10)
    assert not fresh.from_cache
    fresh.cancel()

    listed = {(m["layer"], m["method"], m["params"].get("min_dist")) for m in list_projections(store)}
    assert {("fc", "umap", 0.1), ("fc", "umap", 0.5), ("fc", "pca", None)} <= listed

    # the store rewritten with other data at the same path: the old layouts are not reused
    rewritten = make_store(path, x[::-1].copy(), y[::-1].copy())
    recomputed = project(rewritten, "fc", "umap", n_epochs=30)
    assert not recomputed.from_cache
    recomputed.wait(120)

    # a corrupt cache file is recomputed, with a warning, not a crash
    job = project(rewritten, "fc", "pca")
    job.wait(60)
    (rewritten.section("projections") / f"pca-{job.key}.npy").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unreadable"):
        redo = project(rewritten, "fc", "pca")
    assert not redo.from_cache and redo.wait(60).shape == (500, 2)

    assert clear_projections(rewritten, "fc") == 2  # the PCA and the UMAP layout
    assert list_projections(rewritten) == []
    assert list(rewritten.section("projections").iterdir()) == []  # their neighbours went too


def test_cache_key_follows_a_store_that_grows(tmp_path):
    x, y = blobs(400, d=8)
    writer = StoreWriter(tmp_path / "s", layers={"fc": LayerSpec(neurons=8, dtype="float32")}, n_outputs=5)
    batch = {"label": y[:200], "pred": y[:200], "confidence": np.ones(200), "outputs": np.eye(5)[y[:200]]}
    writer.append(activations={"fc": x[:200]}, **batch)
    store = open_store(tmp_path / "s")
    project(store, "fc", "pca").wait(60)
    assert project(store, "fc", "pca").from_cache
    rest = {"label": y[200:], "pred": y[200:], "confidence": np.ones(200), "outputs": np.eye(5)[y[200:]]}
    writer.append(activations={"fc": x[200:]}, **rest)
    grown = project(store.reload(), "fc", "pca")
    assert not grown.from_cache and grown.wait(60).shape == (400, 2)


# ------------------------------------------------------------------------------ jobs
def test_progress_preview_and_observers(clustered):
    store, _, _ = clustered
    clear_projections(store, "relu")
    events = []
    job = P.ProjectionJob(store, "relu", "umap", n_epochs=200)
    job.on_change(lambda j: events.append((j.status, j.stage, j.progress, j.preview is not None,
                                           j.positions is not None)))
    job.start()
    job.wait(120)
    progress = [e[2] for e in events]
    assert progress == sorted(progress) and progress[-1] == 1.0
    stages = [e[1] for e in events]
    assert stages.index("PCA") < stages.index("neighbours") < stages.index("layout")
    first_preview = next(i for i, e in enumerate(events) if e[3])
    first_result = next(i for i, e in enumerate(events) if e[4])
    assert first_preview < first_result  # the PCA layout is published before the UMAP one
    assert events[-1][0] == "done" and "running" in [e[0] for e in events]
    assert "done in" in repr(job) and "relu" in repr(job)


def test_newer_request_supersedes_running_job(clustered):
    store, _, _ = clustered
    projector = Projector(store)
    slow = projector.request("fc", "umap", n_epochs=100_000, random_state=7)
    deadline = time.time() + 60
    while slow.stage != "layout" and time.time() < deadline:
        time.sleep(0.05)
    assert slow.status == "running"
    assert projector.request("fc", "umap", n_epochs=100_000, random_state=7) is slow  # same request: same job
    fast = projector.request("relu", "pca")
    assert projector.current is fast
    with pytest.raises(ProjectionCancelled):
        slow.wait(10)
    assert slow.status == "cancelled"
    slow._thread.join(5)
    assert not slow._thread.is_alive()  # it stopped computing, not just got ignored
    assert fast.wait(60).shape == (1200, 2)
    assert not list(store.section("projections").glob(f"umap-{slow.key}*"))  # nothing half-done cached


def test_superseded_tsne_child_process_is_stopped(clustered):
    store, _, _ = clustered
    projector = Projector(store)
    tsne = projector.request("fc", "tsne", max_iter=5000, random_state=3)
    deadline = time.time() + 90
    while tsne._child is None and time.time() < deadline:
        time.sleep(0.05)
    child = tsne._child
    assert child is not None and child.poll() is None
    projector.request("fc", "pca")
    with pytest.raises(ProjectionCancelled):
        tsne.wait(30)
    assert child.wait(10) is not None


def test_layout_runs_in_a_thread_whose_sgd_releases_the_gil(clustered):
    """What keeps the notebook responsive, checked without timing it: the layout runs in a job's own
    thread, and its SGD kernel is compiled with nogil, so that thread computes while the kernel's
    thread runs Python (`python benchmarks/bench_projection.py responsive` measures the wake-up lags)."""
    from activis.projection.umap import _sgd_kernel

    assert _sgd_kernel().targetoptions["nogil"]  # the SGD is compiled to run without the GIL
    store, _, _ = clustered
    job = project(store, "fc", "umap", n_epochs=3000, random_state=11)
    try:
        assert job._thread is not None and job._thread is not threading.current_thread()
    finally:
        job.cancel()


# ------------------------------------------------------------------------------ bad input
def test_bad_requests_fail_clearly(clustered, tmp_path):
    store, x, y = clustered
    with pytest.raises(ValueError, match="Unknown projection method 'mds'"):
        project(store, "fc", "mds")
    with pytest.raises(TypeError, match="perplexity.*valid: n_neighbors"):
        project(store, "fc", "umap", perplexity=5)
    with pytest.raises(KeyError, match="captured layers: fc, relu"):
        project(store, "conv9", "pca")
    with pytest.raises(IndexError, match=r"\[0, 1200\)"):
        project(store, "fc", "pca", instances=[0, 5000])
    with pytest.raises(ValueError, match="repeated"):
        project(store, "fc", "pca", instances=[1, 1, 2])
    with pytest.raises(ValueError, match="min_dist"):
        project(store, "fc", "umap", min_dist=3.0)

    bad = x[:50].copy()
    bad[[7, 21]] = np.nan
    broken = write_store(tmp_path / "nan", {"fc": bad}, labels=y[:50], outputs=np.eye(5)[y[:50]])
    with pytest.raises(ProjectionError, match=r"NaN or infinite.*\[7, 21\]"):
        project(broken, "fc", "pca").wait(60)
    assert project(broken, "fc", "pca", instances=np.setdiff1d(np.arange(50), [7, 21])).wait(60).shape == (48, 2)


def test_failure_in_the_worker_is_reported(clustered, monkeypatch):
    store, _, _ = clustered

    def boom(*args, **kwargs):
        raise MemoryError("out of memory in the neighbour search")

    monkeypatch.setattr(jobs_module, "_nearest_neighbors", boom)
    clear_projections(store, "relu")
    job = project(store, "relu", "umap", n_neighbors=9)
    with pytest.raises(ProjectionError, match="UMAP of layer 'relu' failed: out of memory"):
        job.wait(60)
    assert job.status == "failed" and isinstance(job.error, MemoryError)


def test_wait_timeout_and_unstarted_job(clustered):
    store, _, _ = clustered
    job = P.ProjectionJob(store, "fc", "umap", n_epochs=50_000, random_state=5)
    with pytest.raises(ProjectionError, match="never started"):
        job.wait(1)
    job.start()
    with pytest.raises(TimeoutError, match="did not finish within 0.3 s"):
        job.wait(0.3)
    job.cancel()
    with pytest.raises(ProjectionCancelled):
        job.wait(30)


def test_read_only_store_still_projects(clustered, monkeypatch):
    store, _, _ = clustered

    def refuse(*args, **kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(np, "save", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = project(store, "fc", "umap", n_epochs=20, random_state=99)
        job.wait(120)
    assert job.status == "done"
    assert any("Could not cache" in str(w.message) for w in caught)


def test_requests_from_many_threads_leave_one_job_running(clustered):
    store, _, _ = clustered
    projector = Projector(store)
    jobs = []

    def ask(i):
        jobs.append(projector.request("fc", "umap", n_epochs=50_000, random_state=100 + i))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    current = projector.current
    assert current in jobs and current.status == "running"
    for job in jobs:
        if job is not current:
            with pytest.raises(ProjectionCancelled):
                job.wait(60)
    projector.cancel()
    with pytest.raises(ProjectionCancelled):
        current.wait(60)


def test_cancel_racing_start_never_reports_a_running_job_as_finished(clustered):
    store, _, _ = clustered
    rng = np.random.default_rng(0)
    for _ in range(30):
        job = P.ProjectionJob(store, "fc", "pca", instances=rng.choice(1200, 300, replace=False))
        starter = threading.Thread(target=job.start)
        starter.start()
        job.cancel()
        starter.join()
        try:
            positions = job.wait(30)
        except ProjectionCancelled:
            assert job.status == "cancelled"
        else:
            assert job.status == "done" and positions.shape == (300, 2)


def test_umap_of_many_rows_is_fitted_on_a_sample_and_places_the_rest(clustered, monkeypatch):
    import activis.projection.jobs as jobs_module
    from activis.widgets.projection_view import ProjectionView

    store, _, y = clustered
    monkeypatch.setattr(jobs_module, "FIT_ROWS", 300)
    job = project(store, "fc", "umap", n_epochs=100)
    positions = job.wait(180)
    assert positions.shape == (len(y), 2) and np.isfinite(positions).all()  # every point is shown
    assert job.info == {"fitted_on": 300, "placed": len(y) - 300}
    assert label_agreement(positions, y) > 0.95  # the placed points land with their cluster
    view = ProjectionView(store, "fc", "umap", params={"n_epochs": 100})  # the same job, from the cache
    view.job.wait(180)
    view._mirror_job(view.job)
    assert view.note.startswith("fitted on 300 sampled points")  # the view says how it was made
    monkeypatch.setattr(jobs_module, "FIT_ROWS", 10**9)
    full = jobs_module.ProjectionJob(store, "fc", "umap", n_epochs=100)  # not started
    assert full.key != job.key and not full.fit_rows  # a sampled layout is cached apart from a full one
