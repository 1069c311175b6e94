"""The closed-form reductions of per-sample gradients against the materialised gradients.

`Outer` never forms the products u_i v_iᵀ of a Linear layer; `Dense` holds them. Both must count
every histogram bin identically, at every gradient scale (few large products, or many), for bin
ranges with and without an edge at 0, with zeros and signs of both kinds in either factor.
"""

import numpy as np
import pytest
import torch

from activis.cockpit.persample import Bins, Dense, Outer

RANGES = [Bins(100, -2.0, 2.0), Bins(7, -1.0, 2.0), Bins(9, -1.3, 0.7), Bins(5, 0.5, 1.0), Bins(4, -3.0, -0.5)]


def factors(seed, scale, signed_v=True, shape=(6, 9, 13)):
    g = torch.Generator().manual_seed(seed)
    B, m, n = shape
    u = torch.randn(B, m, generator=g, dtype=torch.float64) * scale
    v = torch.randn(B, n, generator=g, dtype=torch.float64)
    if not signed_v:
        v = v.relu()  # post-ReLU inputs: many exact zeros, no negatives
    u[0, :3] = 0.0
    v[1] = 0.0
    return u, v


@pytest.mark.parametrize("shape", [(6, 9, 13), (4, 5, 300)])  # rows binned directly, rows searched
@pytest.mark.parametrize("scale", [1e-3, 0.05, 1.0, 40.0])
@pytest.mark.parametrize("signed_v", [True, False])
def test_outer_histograms_equal_the_materialised_ones(scale, signed_v, shape):
    for seed in range(3):
        u, v = factors(seed, scale, signed_v, shape)
        theta = torch.randn(u.shape[1], v.shape[1], generator=torch.Generator().manual_seed(seed),
                            dtype=torch.float64) * 1.5
        outer, dense = Outer(u, v), Dense(u[:, :, None] * v[:, None, :])
        for bins in RANGES:
            got, want = outer.hist1d(bins).numpy(), dense.hist1d(bins).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{bins} scale {scale}")
            assert got.sum() == u.numel() * v.shape[1]
        for gb, pb in [(Bins(40, -1.0, 1.0), Bins(50, -2.0, 2.0)), (Bins(9, -0.3, 0.6), Bins(3, -1.0, 1.0))]:
            np.testing.assert_array_equal(outer.hist2d(theta, gb, pb).numpy(), dense.hist2d(theta, gb, pb).numpy())
        # the same with the factors' roles swapped (the longer one is searched)
        np.testing.assert_array_equal(Outer(v, u).hist1d(RANGES[0]).numpy(),
                                      Dense(v[:, :, None] * u[:, None, :]).hist1d(RANGES[0]).numpy())


def test_outer_reductions_equal_the_materialised_ones():
    u, v = factors(0, 0.3)
    other_u, other_v = factors(1, 0.3)
    outer, dense = Outer(u, v), Dense(u[:, :, None] * v[:, None, :])
    other_outer, other_dense = Outer(other_u, other_v), Dense(other_u[:, :, None] * other_v[:, None, :])
    direction = torch.randn(u.shape[1], v.shape[1], dtype=torch.float64)
    for got, want in [(outer.sq_norms(), dense.sq_norms()), (outer.dot(direction), dense.dot(direction)),
                      (outer.dot_mean(), dense.dot_mean()), (outer.sum_sq(), dense.sum_sq()),
                      (outer.dot_mean(of=other_outer), dense.dot_mean(of=other_dense))]:
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # the Gram route and the direct route of dot_mean agree (B large against m, n forces the direct one)
    wide_u, wide_v = factors(2, 0.3, shape=(40, 3, 4))
    torch.testing.assert_close(Outer(wide_u, wide_v).dot_mean(),
                               Dense(wide_u[:, :, None] * wide_v[:, None, :]).dot_mean())


def test_bins_refuse_nonsense():
    with pytest.raises(ValueError, match="lo < hi"):
        Bins(10, 1.0, 1.0)
    with pytest.raises(ValueError, match="bins >= 1"):
        Bins(0, -1.0, 1.0)


# ------------------------------------------------------------------ against torch's binning of the materialised values
def reference_1d(values: torch.Tensor, bins: Bins) -> np.ndarray:
    return torch.bincount(bins.index(values).reshape(-1), minlength=bins.bins).numpy()


def reference_2d(grads: torch.Tensor, param: torch.Tensor, gbins: Bins, pbins: Bins) -> np.ndarray:
    cells = gbins.index(grads) * pbins.bins + pbins.index(param)
    return torch.bincount(cells.reshape(-1), minlength=gbins.bins * pbins.bins).reshape(gbins.bins, -1).numpy()


EDGE_RANGES = RANGES + [Bins(1, -1.0, 1.0), Bins(2, -1.0, 1.0), Bins(40, -1.0, 1.0), Bins(3, 1e-30, 2e-30)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1e-3, 0.05, 1.0, 300.0])
def test_kernels_bin_like_torch_on_rounded_products(dtype, scale):
    """float32 products are rounded before binning in float64; every range, zero edge or not."""
    g = torch.Generator().manual_seed(7)
    u = (torch.randn(9, 17, generator=g) * scale).to(dtype)
    v = torch.randn(9, 31, generator=g).to(dtype)
    v[2] = v[2].abs()  # a sample without negatives
    u[3, :5] = -u[3, :5].abs()
    u[4] = 0.0  # empty rows: all products 0
    products = u[:, :, None] * v[:, None, :]
    theta = torch.randn(17, 31, generator=g).to(dtype)
    for bins in EDGE_RANGES:
        want = reference_1d(products, bins)
        np.testing.assert_array_equal(Outer(u, v).hist1d(bins).numpy(), want, err_msg=str(bins))
        np.testing.assert_array_equal(Dense(products).hist1d(bins).numpy(), want, err_msg=str(bins))
        pb = Bins(5, -1.0, 1.0)
        want2 = reference_2d(products, theta, bins, pb)
        np.testing.assert_array_equal(Outer(u, v).hist2d(theta, bins, pb).numpy(), want2, err_msg=str(bins))
        np.testing.assert_array_equal(Dense(products).hist2d(theta, bins, pb).numpy(), want2, err_msg=str(bins))


def test_tiny_products_keep_the_bins_of_their_rounded_values():
    """Products that underflow to -0.0 or land within one rounding of the zero edge (float32)."""
    u = torch.tensor([[1e-30, -1e-30, 3e-20, 1.0], [-1e-38, 2e-39, 1e-3, -1e-3]], dtype=torch.float32)
    v = torch.tensor([[-1e-20, 1e-20, 1e-16, -1e-16, 0.5, -0.5], [1e-10, -3e-10, 1e-38, -1e-38, 2.0, -2.0]],
                     dtype=torch.float32)
    products = u[:, :, None] * v[:, None, :]
    for bins in [Bins(100, -2.0, 2.0), Bins(40, -1.0, 1.0), Bins(7, -1.0, 2.0), Bins(2, -1e-30, 1e-30)]:
        np.testing.assert_array_equal(Outer(u, v).hist1d(bins).numpy(), reference_1d(products, bins))
        theta = torch.linspace(-1, 1, 24).reshape(4, 6)
        np.testing.assert_array_equal(Outer(u, v).hist2d(theta, bins, Bins(3, -1, 1)).numpy(),
                                      reference_2d(products, theta, bins, Bins(3, -1, 1)))


def test_non_contiguous_and_half_precision_inputs():
    g = torch.Generator().manual_seed(3)
    u_t, v_t = torch.randn(13, 6, generator=g), torch.randn(21, 6, generator=g)  # transposed views below
    u, v = u_t.T, v_t.T[:, ::2]
    assert not u.is_contiguous() and not v.is_contiguous()
    bins = Bins(100, -2.0, 2.0)
    products = u[:, :, None] * v[:, None, :]
    np.testing.assert_array_equal(Outer(u, v).hist1d(bins).numpy(), reference_1d(products, bins))
    np.testing.assert_array_equal(Dense(products.transpose(1, 2)).hist1d(bins).numpy(), reference_1d(products, bins))
    half_u, half_v = u.to(torch.bfloat16), v.to(torch.bfloat16)
    rounded = half_u[:, :, None] * half_v[:, None, :]  # products rounded to bfloat16
    np.testing.assert_array_equal(Outer(half_u, half_v).hist1d(bins).numpy(), reference_1d(rounded, bins))


def test_nan_gradients_make_the_histogram_unavailable():
    from activis.cockpit import Unavailable

    u, v = torch.randn(3, 4), torch.randn(3, 5)
    v[1, 2] = float("nan")
    bins = Bins(10, -1.0, 1.0)
    for ps in (Outer(u, v), Dense(u[:, :, None] * v[:, None, :])):
        with pytest.raises(Unavailable, match="NaN"):
            ps.hist1d(bins)
        with pytest.raises(Unavailable, match="NaN"):
            ps.hist2d(torch.zeros(4, 5), bins, bins)
    u[0, 0] = float("inf")  # inf * 0 is NaN too, inf alone is counted in the edge bin
    v = torch.ones(3, 5)
    np.testing.assert_array_equal(Outer(u, v).hist1d(bins).numpy(), reference_1d(u[:, :, None] * v[:, None, :], bins))


def test_all_large_products_are_counted_exactly():
    """Unnormalised inputs (x 255): most products beyond the range, each row crossing many bins
    (their cost, against materialising them, is in benchmarks/bench_histograms.py)."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(64, 128, generator=g) * 0.05
    v = torch.rand(64, 400, generator=g) * 255
    bins = Bins(100, -2.0, 2.0)
    outer, dense = Outer(u, v), Dense(u[:, :, None] * v[:, None, :])
    np.testing.assert_array_equal(outer.hist1d(bins).numpy(), dense.hist1d(bins).numpy())
    assert outer.hist1d(bins)[[0, -1]].sum() > 0.5 * u.numel() * v.shape[1]


@pytest.mark.parametrize("threads", [2, 3])
def test_histograms_on_several_threads_count_what_one_thread_counts(monkeypatch, threads):
    """Large histograms run on torch's thread count, samples (or values) split between threads."""
    import numba

    from activis.cockpit import persample

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here")
    u, v = factors(0, 0.3, True, (37, 11, 50))  # 37 samples: uneven slices
    before = torch.get_num_threads()
    serial = [Outer(u, v).hist1d(RANGES[0]), Dense(u[:, :, None] * v[:, None, :]).hist1d(RANGES[1])]
    calls = []
    monkeypatch.setattr(persample, "_PARALLEL_WORK", 0)
    kernels = persample._kernels()
    for name in ("outer_hist1d_split", "dense_hist1d_split"):
        kernel = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, kernel=kernel, name=name: calls.append((name, a[-1]))
                            or kernel(*a))
    try:
        torch.set_num_threads(threads)
        split = [Outer(u, v).hist1d(RANGES[0]), Dense(u[:, :, None] * v[:, None, :]).hist1d(RANGES[1])]
        assert torch.get_num_threads() == threads  # numba's thread pool leaves torch's setting alone
    finally:
        torch.set_num_threads(before)
    chunks = min(threads, numba.config.NUMBA_NUM_THREADS)
    assert calls == [("outer_hist1d_split", chunks), ("dense_hist1d_split", chunks)]
    for a, b in zip(serial, split):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(split[0].sum()) == 37 * 11 * 50


def test_histograms_leave_torchs_thread_count_alone():
    """numba's OpenMP pool shares the runtime with torch: starting it once set torch's thread count
    to numba's (a fresh process shows it: 1 became 2, so a one-thread training ran on two)."""
    import subprocess
    import sys

    script = """if True:
        import torch
        from activis.cockpit.persample import Bins, Dense, Outer
        bins = Bins(100, -2.0, 2.0)
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            Dense(torch.randn(300, 400)).hist1d(bins)
            Outer(torch.randn(300, 200), torch.randn(300, 400)).hist1d(bins)
            print(torch.get_num_threads(), end=" ")
    """
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "2", "1"]
