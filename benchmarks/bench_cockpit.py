"""Time per training step with the cockpit tracking every step, against a plain step, on CPU.

    python benchmarks/bench_cockpit.py [--rounds 30] [--threads N]

For an MLP (784-512-256-10, 535,818 parameters), a small CNN (two 5x5 convolutions and two
Linear layers, 215,370 parameters) and a wide MLP (784-2048-2048-10, 5.8 M parameters: how the
ratios change when the same kind of model grows), batch 128, on MNIST-like data: scikit-learn's digits scaled
up to 28 x 28 and standardised (the histograms' cost grows with the number of large per-sample
gradient elements, so the data matters). Configurations economy, business and full, each
logging to a folder; business also with the Monte-Carlo Gauss-Newton diagonal (an estimate, one
backpropagated column instead of ten) and full also with the reference's random start of the
power iteration (the default full warm-starts it from the previous step's eigenvector).
One configuration at a time, as in a training: its plain and tracked steps alternate so that the
load of a shared machine hits both alike; the ratio of medians is printed, and the extra time,
and under it where the extra time goes (``cockpit.costs()``), in plain steps.
Targets: economy <= 2x, business <= 3x, full <= 6x.

When the reference, cockpit-for-pytorch 1.0.2 with BackPACK, can be imported (``--reference-path
DIR`` puts a folder holding it first on the path; it needs no other torch than ours, e.g.
``pip install --no-deps --target DIR cockpit-for-pytorch==1.0.2 backpack-for-pytorch einops unfoldNd
json-tricks "setuptools<80" matplotlib contourpy cycler fonttools kiwisolver pyparsing seaborn``),
its step is timed on the same model, data and configuration, alternating with ours, and
activis / reference is printed per configuration.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from activis.cockpit import Cockpit, configuration

BATCH = 128


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def wide_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                         nn.Linear(2048, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


CONFIGS = {  # name -> (quantities, Cockpit options)
    "economy": (lambda: configuration("economy"), {}),
    "business": (lambda: configuration("business"), {}),
    "business (ggn-mc)": (lambda: configuration("business"), {"hessian_diagonal": "ggn-mc"}),
    "full": (lambda: configuration("full", HessMaxEV={"warm_start": True}), {}),
    "full (random start)": (lambda: configuration("full"), {}),
}


def digits_28(batches):
    """MNIST-like batches: digits (8 x 8, 0..16) scaled up to 28 x 28 and standardised."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = F.interpolate(torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16, size=(28, 28),
                      mode="bilinear", align_corners=False)
    x = (x - x.mean()) / x.std()
    y = torch.tensor(y)
    return [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]) for i in range(batches)]


class Runner:
    """One model and optimizer; ``step()`` is one training step, tracked when a cockpit is given."""

    def __init__(self, factory, data, config=None, logdir=None):
        torch.manual_seed(0)
        self.model = factory()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.data = data
        self.i = 0
        self.cockpit = None
        if config is not None:
            quantities, options = config
            self.cockpit = Cockpit(self.model, quantities(), optimizer=self.opt, log_dir=logdir, **options)

    def step(self) -> float:
        x, y = self.data[self.i % len(self.data)]
        self.i += 1
        t0 = time.perf_counter()
        self.opt.zero_grad()
        out = self.model(x)
        if self.cockpit is None:
            F.cross_entropy(out, y).backward()
        else:
            self.cockpit.backward(F.cross_entropy(out, y, reduction="none"))
        self.opt.step()
        return time.perf_counter() - t0


class ReferenceRunner:
    """The same model and optimizer tracked by cockpit-for-pytorch (BackPACK), as its README shows."""

    def __init__(self, factory, data, config: str):
        from backpack import extend
        from cockpit import Cockpit as ReferenceCockpit
        from cockpit.utils.configuration import configuration as reference_configuration

        torch.manual_seed(0)
        self.model = extend(factory())
        self.loss = extend(nn.CrossEntropyLoss())
        self.individual = nn.CrossEntropyLoss(reduction="none")
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.cockpit = ReferenceCockpit(self.model.parameters(), quantities=reference_configuration(config))
        self.data = data
        self.i = 0

    def step(self) -> float:
        x, y = self.data[self.i % len(self.data)]
        step = self.i  # from 0, as its quantities expect (α at step 1 ends what step 0 started)
        self.i += 1
        t0 = time.perf_counter()
        self.opt.zero_grad()
        out = self.model(x)
        loss, losses = self.loss(out, y), self.individual(out, y)
        info = {"batch_size": len(x), "individual_losses": losses, "loss": loss, "optimizer": self.opt}
        with self.cockpit(step, info=info):
            loss.backward(create_graph=self.cockpit.create_graph(step))
        self.opt.step()
        return time.perf_counter() - t0


def reference_available() -> bool:
    try:
        import backpack  # noqa: F401
        import cockpit  # noqa: F401
    except ImportError:
        return False
    return True


def hvp_seconds(model, batch, repeats=10) -> float:
    """Median time of one Hessian-vector product through the gradient's graph: the unit HessMaxEV pays."""
    x, y = batch
    params = list(model.parameters())
    grads = torch.autograd.grad(F.cross_entropy(model(x), y), params, create_graph=True)
    vecs = [torch.randn_like(p) for p in params]
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        torch.autograd.grad(grads, params, vecs, retain_graph=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def breakdown(cockpit, steps, plain, shown=4) -> str:
    """The costliest quantities and shared reductions per tracked step, in plain steps (from
    ``cockpit.costs()``; the first call, which compiles, left out), and the rest summed."""
    costs = cockpit.costs().dropna(subset=["mean_ms"])
    per_step = costs["mean_ms"] * costs["calls"] / steps / (plain * 1e3)
    ranked = sorted(zip(costs["name"], per_step), key=lambda item: -item[1])
    parts = [f"{name} {value:.2f}" for name, value in ranked[:shown]]
    rest = sum(value for _, value in ranked[shown:])
    return ", ".join(parts) + f", the other {len(ranked) - shown} together {rest:.2f}"


def bench(name, factory, data, rounds, warmup=5, reference=False):
    params = sum(p.numel() for p in factory().parameters())
    print(f"\n{name}: {params:,} parameters, batch {BATCH}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (c, config) in enumerate(CONFIGS.items()):
            # one configuration at a time, as in a training: the others' memory and caches do not
            # weigh on it; its plain steps alternate with its tracked ones (and the reference's)
            plain, tracked = Runner(factory, data), Runner(factory, data, config, f"{tmp}/{name}-{i}")
            runners = {"plain": plain, "tracked": tracked}
            if reference and c in ("economy", "business", "full"):
                runners["reference"] = ReferenceRunner(factory, data, c)
            times = {key: [] for key in runners}
            for r in range(warmup + rounds):
                for key, runner in runners.items():
                    t = runner.step()
                    if r >= warmup:
                        times[key].append(t)
            base, med = statistics.median(times["plain"]), statistics.median(times["tracked"])
            extra = ""
            maxev = next((q for q in tracked.cockpit.quantities if q.name == "HessMaxEV"), None)
            if maxev is not None:
                extra = f"  (last step: {maxev.products} Hessian-vector products)"
            print(f"  {c:<20} {med * 1e3:7.1f} ms against {base * 1e3:5.1f} ms plain   {med / base:5.2f}x   "
                  f"(+{(med - base) * 1e3:.1f} ms){extra}")
            print(f"  {'':<20} where it goes, in plain steps: {breakdown(tracked.cockpit, tracked.i, base)}")
            if "reference" in times:
                ref = statistics.median(times["reference"])
                print(f"  {'':<20} cockpit-for-pytorch {ref * 1e3:7.1f} ms = {ref / base:5.2f}x plain;  "
                      f"activis / reference = {med / ref:.3f}")
            tracked.cockpit.close()
            if tracked.cockpit.skipped:
                print(f"  skipped in {tracked.cockpit.log.run}: {tracked.cockpit.skipped}")
    hvp, step = hvp_seconds(plain.model, data[0]), statistics.median(times["plain"])
    print(f"  one Hessian-vector product (double backward): {hvp * 1e3:.1f} ms = {hvp / step:.2f} plain steps;"
          " the reference's stopping rule needs at least 2 per tracked step")


def arguments(doc: str, rounds: int) -> argparse.Namespace:
    """``--rounds`` and ``--threads`` (set on torch), shared by the cockpit's benchmarks."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--reference-path", default=None,
                        help="a folder holding cockpit-for-pytorch and BackPACK, put first on the path")
    args = parser.parse_args()
    if args.reference_path:
        sys.path.insert(0, args.reference_path)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds")
    return args


def main():
    warnings.filterwarnings("ignore", message="Using backward\\(\\) with create_graph=True")
    args = arguments(__doc__, rounds=30)
    data = digits_28(8)
    reference = reference_available()
    print("reference: cockpit-for-pytorch " + ("timed alongside" if reference else
                                               "not importable (see --reference-path): not timed"))
    bench("MLP", mlp, data, args.rounds, reference=reference)
    bench("CNN", cnn, data, args.rounds, reference=reference)
    bench("wide MLP", wide_mlp, data, args.rounds, reference=reference)


if __name__ == "__main__":
    main()
