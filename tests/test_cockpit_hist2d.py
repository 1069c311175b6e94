"""GradHist2d's Linear-layer kernel (`outer_hist2d`) against the materialised products, bin for bin.

Rows of every class in one batch: all in one band bin, split by the sign rule, leaving the band
(up to both clamped edges), too small to keep the sign rule (binned one by one), zeros and -0.0 in
either factor, infinities; float32 and float64; batches around a multiple of 64 (the sample
bitsets' words); parameters spanning few or many bins.
"""

import numpy as np
import pytest
import torch

from activis.cockpit import _kernels
from activis.cockpit.persample import Bins, Dense, Outer, _param_bins

GRAD_BINS = [Bins(40, -1.0, 1.0), Bins(7, -1.0, 2.0), Bins(5, 0.5, 1.0), Bins(100, -2.0, 2.0)]


def reference(products: torch.Tensor, theta: torch.Tensor, gbins: Bins, pbins: Bins) -> np.ndarray:
    """The histogram of the materialised products (rounded in their dtype), binned in float64."""
    g = gbins.index(products)  # (B, m, n)
    p = pbins.index(theta).expand_as(g)
    flat = (g * pbins.bins + p).reshape(-1).numpy()
    return np.bincount(flat, minlength=gbins.bins * pbins.bins).reshape(gbins.bins, pbins.bins)


def mixed_factors(B: int, dtype: torch.dtype, seed: int, m: int = 9, n: int = 150):
    """Rows at scales from 1e-20 to 30 (every class), zeros and -0.0 in both factors."""
    g = torch.Generator().manual_seed(seed)
    row_scale = 10.0 ** (torch.rand(1, m, generator=g, dtype=torch.float64) * 22 - 20)
    u = (torch.randn(B, m, generator=g, dtype=torch.float64) * row_scale).to(dtype)
    v = torch.randn(B, n, generator=g, dtype=torch.float64).to(dtype)
    v[:, : n // 5] = v[:, : n // 5].relu()  # exact zeros
    v[:, n // 5: n // 4] = -0.0
    u[:, 0] = 0.0
    u[:, 1] = -0.0
    if B > 2:
        v[1] = v[1].abs()  # a sample without negatives
        u[2] = 0.0  # a sample whose products are all 0
    if B > 5:
        v[5, 7:40] *= 1e4  # products far beyond both edges
    return u, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B", [1, 63, 64, 65, 130])
def test_every_row_class_is_counted_exactly(dtype, B):
    u, v = mixed_factors(B, dtype, seed=B)
    theta = (torch.randn(u.shape[1], v.shape[1], generator=torch.Generator().manual_seed(1)) * 0.05).to(dtype)
    products = u[:, :, None] * v[:, None, :]
    pbins = Bins(50, -2.0, 2.0)
    for gbins in GRAD_BINS:
        want = reference(products, theta, gbins, pbins)
        np.testing.assert_array_equal(Outer(u, v).hist2d(theta, gbins, pbins).numpy(), want, err_msg=str(gbins))
    np.testing.assert_array_equal(Dense(products).hist2d(theta, GRAD_BINS[0], pbins).numpy(),
                                  reference(products, theta, GRAD_BINS[0], pbins))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_parameters_spanning_many_bins(dtype):
    """Rows whose parameters span more bins than the per-bin sums take (counted element by element)."""
    u, v = mixed_factors(65, dtype, seed=3, m=6, n=200)
    theta = torch.linspace(-3, 3, u.shape[1] * v.shape[1], dtype=dtype).reshape(u.shape[1], v.shape[1])
    theta[2] = 0.01  # and one row in a single bin
    products = u[:, :, None] * v[:, None, :]
    for gbins in GRAD_BINS[:2]:
        for pbins in (Bins(50, -2.0, 2.0), Bins(1, -1.0, 1.0)):
            np.testing.assert_array_equal(Outer(u, v).hist2d(theta, gbins, pbins).numpy(),
                                          reference(products, theta, gbins, pbins))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_most_products_beyond_the_range(dtype):
    """Unnormalised inputs: nearly every row leaves the band, many products at the clamped edges."""
    g = torch.Generator().manual_seed(0)
    u = (torch.randn(70, 12, generator=g) * 0.05).to(dtype)
    v = (torch.rand(70, 300, generator=g) * 255).to(dtype)
    theta = (torch.randn(12, 300, generator=g) * 0.05).to(dtype)
    products = u[:, :, None] * v[:, None, :]
    gbins, pbins = Bins(40, -1.0, 1.0), Bins(50, -2.0, 2.0)
    want = reference(products, theta, gbins, pbins)
    assert want[[0, -1]].sum() > 0.5 * products.numel()
    np.testing.assert_array_equal(Outer(u, v).hist2d(theta, gbins, pbins).numpy(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_infinities_and_nan_products(dtype):
    u, v = mixed_factors(66, dtype, seed=5)
    v[:, : v.shape[1] // 4] = 1.0  # no zeros: inf * v is never NaN
    u[3, 4] = float("inf")
    u[7, 5] = -float("inf")
    u[9] = torch.where(u[9] == 0, 1e-3, u[9])
    v[9, 10] = float("inf")
    theta = torch.zeros(u.shape[1], v.shape[1], dtype=dtype)
    products = u[:, :, None] * v[:, None, :]
    assert not products.isnan().any()
    gbins, pbins = Bins(40, -1.0, 1.0), Bins(5, -1.0, 1.0)
    np.testing.assert_array_equal(Outer(u, v).hist2d(theta, gbins, pbins).numpy(),
                                  reference(products, theta, gbins, pbins))
    u[11, 2] = float("nan")
    v[12, 3] = 0.0
    u[12, 1] = float("inf")
    products = u[:, :, None] * v[:, None, :]
    x, y = u.numpy(), v.numpy()
    P, c0 = gbins.band(x.dtype)
    hist = np.zeros((gbins.bins + 1, pbins.bins), dtype=np.int64)
    nans = _kernels.outer_hist2d(x, y, _param_bins(theta, pbins), P, c0, gbins.lo, gbins.width, hist)
    assert nans == int(products.isnan().sum()) > 0
    assert hist.sum() == products.numel()
    dense = np.zeros_like(hist)  # the Dense path (a convolution's) counts them alike
    flat = np.ascontiguousarray(products.reshape(products.shape[0], -1).numpy())
    assert _kernels.dense_hist2d(flat, _param_bins(theta, pbins).reshape(-1), P, c0, gbins.lo, gbins.width,
                                 dense) == nans
    np.testing.assert_array_equal(dense, hist)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_parameter_bins_equal_the_reference_at_every_edge(dtype):
    bins = Bins(50, -2.0, 2.0)
    edges = torch.tensor([bins.lo + k * bins.width for k in range(bins.bins + 1)], dtype=torch.float64).to(dtype)
    ulp = torch.finfo(dtype).eps
    values = torch.cat([edges, edges * (1 + ulp), edges * (1 - ulp), edges + ulp, edges - ulp,
                        torch.tensor([0.0, -0.0, 5.0, -5.0, float("inf"), -float("inf"), float("nan")], dtype=dtype),
                        torch.randn(998, generator=torch.Generator().manual_seed(0)).to(dtype)])
    want = bins.index(values).to(torch.int32).numpy()
    np.testing.assert_array_equal(_param_bins(values.reshape(-1, 9), bins).reshape(-1), want)


@pytest.mark.parametrize("chunks", [2, 3])
def test_parallel_kernels_equal_the_serial_ones(chunks):
    """Slices of the samples on several threads, their partial histograms summed."""
    u, v = mixed_factors(130, torch.float32, seed=11)
    theta = torch.randn(u.shape[1], v.shape[1], generator=torch.Generator().manual_seed(2))
    x, y = u.numpy(), v.numpy()
    gbins, pbins = GRAD_BINS[0], Bins(50, -2.0, 2.0)
    P, c0 = gbins.band(x.dtype)
    pidx = _param_bins(theta, pbins)
    flat = np.ascontiguousarray((u[:, :, None] * v[:, None, :]).reshape(u.shape[0], -1).numpy())
    for kernel, args in (("outer_hist2d", (x, y, pidx)), ("dense_hist2d", (flat, pidx.reshape(-1)))):
        serial = np.zeros((gbins.bins + 1, pbins.bins), dtype=np.int64)
        parallel = np.zeros_like(serial)
        nans = getattr(_kernels, kernel)(*args, P, c0, gbins.lo, gbins.width, serial)
        assert getattr(_kernels, kernel + "_split")(*args, P, c0, gbins.lo, gbins.width, parallel, chunks) == nans
        np.testing.assert_array_equal(parallel, serial, err_msg=kernel)
