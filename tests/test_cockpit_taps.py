"""Per-sample gradients of Linear and convolution layers from the taps against single-sample backwards.

`layer_grads` computes a convolution's per-sample gradients with a grouped kernel or with im2col,
whichever is faster for the shapes; every geometry a convolution module can
have (stride, padding numbers, 'same' even and uneven, 'valid', non-zero padding modes, dilation,
groups, no bias, 1D/2D/3D) and the Gauss-Newton diagonal's leading column dimension must give
exactly the gradients of a loop of single-sample backward passes in float64.
"""

import pytest
import torch
from torch import nn

from activis.cockpit import taps
from activis.cockpit.taps import Taps, layer_grads

B = 5

CONVS = {
    "conv2d": lambda: nn.Conv2d(3, 4, 3, padding=1),
    "strided": lambda: nn.Conv2d(3, 4, (3, 2), stride=(2, 3), padding=(1, 0)),
    "dilated": lambda: nn.Conv2d(3, 4, 3, dilation=2, padding=2),
    "same_even": lambda: nn.Conv2d(3, 4, 5, padding="same"),
    "same_uneven": lambda: nn.Conv2d(3, 4, (4, 3), padding="same", dilation=(1, 2)),
    "valid": lambda: nn.Conv2d(3, 4, 3, padding="valid"),
    "groups": lambda: nn.Conv2d(4, 6, 3, groups=2, padding=1),
    "depthwise": lambda: nn.Conv2d(4, 8, 3, groups=4, stride=2),
    "no_bias": lambda: nn.Conv2d(3, 4, 3, bias=False),
    "reflect": lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
    "circular_same": lambda: nn.Conv2d(3, 4, 4, padding="same", padding_mode="circular"),
    "conv1d": lambda: nn.Conv1d(4, 4, 3, stride=2, groups=2, padding="valid"),
    "conv1d_same": lambda: nn.Conv1d(3, 2, 4, padding="same", padding_mode="replicate"),
    "conv3d": lambda: nn.Conv3d(2, 3, (2, 3, 3), stride=(1, 2, 1), padding=1),
}


def conv_input(module, generator):
    size = {1: (11,), 2: (9, 8), 3: (4, 7, 6)}[len(module.kernel_size)]
    return torch.randn(B, module.in_channels, *size, generator=generator, dtype=torch.float64)


def reference(module, x, output_grad):
    """Per-sample gradients of sum(output_grad_i * module(x_i)), one backward per sample."""
    rows = {"weight": [], "bias": []}
    for i in range(len(x)):
        module.zero_grad()
        (module(x[i:i + 1]) * output_grad[i:i + 1]).sum().backward()
        for kind in rows:
            if getattr(module, kind, None) is not None:
                rows[kind].append(getattr(module, kind).grad.clone())
    return {k: torch.stack(v) for k, v in rows.items() if v}


@pytest.mark.parametrize("name", list(CONVS))
def test_conv_per_sample_gradients_equal_single_sample_backwards(name):
    torch.manual_seed(0)
    module = CONVS[name]().double()
    g = torch.Generator().manual_seed(1)
    x = conv_input(module, g)
    out = module(x)
    output_grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = layer_grads(module, x, output_grad)
    want = reference(module, x, output_grad)
    assert got.keys() == want.keys()
    for kind in want:
        torch.testing.assert_close(got[kind], want[kind], rtol=1e-12, atol=1e-12, msg=f"{name} {kind}")
    # both kernels, whichever the timing picked above
    padded, padding = taps._conv_input(module, x)
    kernels = [taps._grouped_weight_grads] + ([taps._unfolded_weight_grads] if x.dim() < 5 else [])
    for kernel in kernels:
        torch.testing.assert_close(kernel(module, padded, padding, output_grad), want["weight"], rtol=1e-12,
                                   atol=1e-12, msg=f"{name} {kernel.__name__}")


def test_the_faster_kernel_is_timed_once_per_geometry(monkeypatch):
    calls = []

    def counted(kernel):
        def run(*args):
            calls.append(kernel.__name__)
            return kernel(*args)
        run.__name__ = kernel.__name__
        return run

    monkeypatch.setattr(taps, "_FASTER", {})
    monkeypatch.setattr(taps, "_grouped_weight_grads", counted(taps._grouped_weight_grads))
    monkeypatch.setattr(taps, "_unfolded_weight_grads", counted(taps._unfolded_weight_grads))
    module = nn.Conv2d(3, 4, 3)
    x, output_grad = torch.randn(B, 3, 6, 6), torch.randn(B, 4, 4, 4)
    first = layer_grads(module, x, output_grad)["weight"]
    assert sorted(calls) == ["_grouped_weight_grads"] * 3 + ["_unfolded_weight_grads"] * 3
    calls.clear()
    torch.testing.assert_close(layer_grads(module, x, output_grad)["weight"], first)
    assert len(calls) == 1 and len(taps._FASTER) == 1
    layer_grads(module, x[:4], output_grad[:4])  # 4 and 5 samples: rounded up to 4 and 8
    assert len(calls) == 7 and len(taps._FASTER) == 2
    layer_grads(module, torch.randn(7, 3, 7, 6), torch.randn(7, 4, 5, 4))  # rounded up to the first shape
    assert len(calls) == 8 and len(taps._FASTER) == 2


@pytest.mark.parametrize("name", ["strided", "groups", "same_uneven", "conv1d"])
def test_leading_columns_are_independent_output_gradients(name):
    # the Gauss-Newton diagonal passes (columns, B, *out): each column is its own per-sample gradient
    torch.manual_seed(0)
    module = CONVS[name]().double()
    g = torch.Generator().manual_seed(2)
    x = conv_input(module, g)
    columns = torch.randn(2, 3, *module(x).shape, generator=g, dtype=torch.float64)
    got = layer_grads(module, x, columns)
    for c in range(2):
        for d in range(3):
            want = reference(module, x, columns[c, d])
            for kind in want:
                torch.testing.assert_close(got[kind][c, d], want[kind], rtol=1e-12, atol=1e-12)


def test_float32_per_sample_gradients_are_exact_to_round_off():
    torch.manual_seed(0)
    module = nn.Conv2d(16, 32, 5, padding=2)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 16, 14, 14, generator=g)
    output_grad = torch.randn(8, 32, 14, 14, generator=g)
    got = layer_grads(module, x, output_grad)["weight"]
    want = reference(module.double(), x.double(), output_grad.double())["weight"]
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


class TwoCalls(nn.Module):
    """One convolution applied twice, a Linear layer over positions: per-sample gradients sum calls."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.seq = nn.Linear(25, 3)

    def forward(self, x):
        return self.seq(self.conv(torch.relu(self.conv(x))).flatten(2)).mean(1)


def test_taps_per_sample_gradients_of_a_model_equal_single_sample_backwards():
    torch.manual_seed(0)
    model = TwoCalls().double()
    tapped = Taps(model)
    x = torch.randn(B, 2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 3, (B,), generator=torch.Generator().manual_seed(5))
    tapped.armed = True
    losses = nn.functional.cross_entropy(model(x), y, reduction="none")
    losses.mean().backward()
    params = list(model.parameters())
    got = tapped.per_sample(params, B)
    assert len(tapped.layers[0].calls) == 2
    for i in range(B):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for p, ps in zip(params, got):
            torch.testing.assert_close(ps.grads[i], p.grad, rtol=1e-12, atol=1e-12)
    tapped.remove()


# ------------------------------------------------------------------ the loss Hessian's roots
def _losses(kind, out, y, dtype):
    weights = torch.linspace(0.5, 2.0, out.shape[1], dtype=dtype)
    return {
        "ce": lambda: nn.functional.cross_entropy(out, y, reduction="none"),
        "smoothed": lambda: nn.functional.cross_entropy(out, y, reduction="none", label_smoothing=0.2),
        "weighted": lambda: nn.functional.cross_entropy(out, y, reduction="none", weight=weights),
        "ignored": lambda: nn.functional.cross_entropy(out, torch.where(y == 1, -100, y), reduction="none"),
        "tempered": lambda: nn.functional.cross_entropy(out / 2, y, reduction="none"),
        "mse": lambda: (out - 1).square().sum(1),
        "cubic": lambda: (out ** 3).sum(1) / 10,  # indefinite: negative eigenvalues
    }[kind]()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1.0, 40.0])  # 40: confident samples, probabilities below 1e-30
@pytest.mark.parametrize("kind", ["ce", "smoothed", "weighted", "ignored", "tempered", "mse", "cubic"])
def test_loss_hessian_roots_rebuild_every_sample_hessian(kind, scale, dtype):
    from activis.cockpit.hessian import _loss_hessian_roots, _softmax_roots

    g = torch.Generator().manual_seed(6)
    out = (torch.randn(16, 6, generator=g, dtype=dtype) * scale).requires_grad_()
    y = torch.randint(0, 6, (16,), generator=g)
    losses = _losses(kind, out, y, dtype)
    roots, signs = _loss_hessian_roots(losses, out)
    got = torch.einsum("kbc,kb,kbd->bcd", roots.double(), signs.double(), roots.double())
    want = torch.stack([torch.func.hessian(lambda o, i=i: _losses(kind, o, y, torch.float64)[i])(
        out.detach().double())[i, :, i, :] for i in range(16)])
    # round-off is relative to the probabilities (<= 1) and weights, not to the small entries of a
    # confident sample's Hessian (p_j - p_j² cancels in the reference too)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(got, want, rtol=0, atol=tol * max(1.0, float(want.abs().max())))
    (first,) = torch.autograd.grad(_losses(kind, out, y, dtype).sum(), out, create_graph=True)
    closed_form = _softmax_roots(first, out) is not None
    # the closed form is taken exactly for softmax cross-entropy, whatever its targets and weights
    assert closed_form == (kind in ("ce", "smoothed", "weighted", "ignored")), kind
    if closed_form:
        assert roots.shape[0] == 5  # C - 1 columns, as many as the eigendecomposition keeps
