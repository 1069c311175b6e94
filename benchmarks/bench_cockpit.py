"""Time per training step with the cockpit tracking every step, against a plain step, on CPU.

    python benchmarks/bench_cockpit.py [--rounds 30] [--threads N]

For an MLP (784-512-256-10, 535,818 parameters) and a small CNN (two 5x5 convolutions and two
Linear layers on 28 x 28 inputs), batch 128: economy, business and full configurations (full with
HessMaxEV warm-started from the previous step's eigenvector, and once more with the reference's
random start), each logging to a folder. Plain and tracked steps alternate within each round so
that the load of a shared machine hits both alike; the ratio of medians is printed.
Targets: economy <= 2x, business <= 3x, full <= 6x.
"""

from __future__ import annotations

import argparse
import statistics
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


def cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


CONFIGS = {
    "economy": lambda: configuration("economy"),
    "business": lambda: configuration("business"),
    "full": lambda: configuration("full", HessMaxEV={"warm_start": True}),
    "full (random start)": lambda: configuration("full"),
}


class Runner:
    """One model and optimizer; ``step()`` is one training step, tracked when a cockpit is given."""

    def __init__(self, factory, data, quantities=None, logdir=None):
        torch.manual_seed(0)
        self.model = factory()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.data = data
        self.i = 0
        self.cockpit = None
        if quantities is not None:
            self.cockpit = Cockpit(self.model, quantities(), optimizer=self.opt, log_dir=logdir)

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


def bench(name, factory, shape, rounds, warmup=5):
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(BATCH, *shape, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
            for _ in range(8)]
    with tempfile.TemporaryDirectory() as tmp:
        plain = Runner(factory, data)
        tracked = {c: Runner(factory, data, q, f"{tmp}/{name}-{c.split()[0]}-{i}")
                   for i, (c, q) in enumerate(CONFIGS.items())}
        times = {c: [] for c in ["plain", *tracked]}
        for r in range(warmup + rounds):
            for c, runner in tracked.items():
                t_plain = plain.step()
                t = runner.step()
                if r >= warmup:
                    times["plain"].append(t_plain)
                    times[c].append(t)
        params = sum(p.numel() for p in plain.model.parameters())
        base = statistics.median(times["plain"])
        print(f"\n{name}: {params:,} parameters, batch {BATCH}, plain step {base * 1e3:.1f} ms (median)")
        for c in tracked:
            med = statistics.median(times[c])
            extra = ""
            maxev = next((q for q in tracked[c].cockpit.quantities if q.name == "HessMaxEV"), None)
            if maxev is not None:
                extra = f"  (last step: {maxev.products} Hessian-vector products)"
            print(f"  {c:<20} {med * 1e3:7.1f} ms   {med / base:5.2f}x{extra}")
        for runner in tracked.values():
            runner.cockpit.close()
            if runner.cockpit.skipped:
                print(f"  skipped in {runner.cockpit.log.run}: {runner.cockpit.skipped}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Using backward\\(\\) with create_graph=True")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds")
    bench("MLP", mlp, (1, 28, 28), args.rounds)
    bench("CNN", cnn, (1, 28, 28), args.rounds)


if __name__ == "__main__":
    main()
