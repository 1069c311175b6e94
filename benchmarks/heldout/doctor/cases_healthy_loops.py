"""Healthy loops that look like the training-phase faults but are right: gradient accumulation done properly,
gradual unfreezing, warm restarts, ReduceLROnPlateau, a weighted sampler, a length curriculum with clipping.
A watched run must stay silent on each (and a checkup of its build)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import (  # noqa: E402
    MLP,
    RNNText,
    SmallCNN,
    accuracy,
    batches,
    ce,
    digit_images,
    nn,
    run_loop,
    seed,
    split,
    tabular,
    text_data,
    torch,
)

CASES = []
STEPS = 160


def healthy(name, note, build, steps=STEPS):
    def register(train):
        CASES.append({"name": name, "kind": "healthy", "phase": "checkup", "cause": None, "where": None,
                      "where_also": [], "onset": None, "steps": steps, "build": build, "train": train,
                      "note": note})
        return train
    return register


def cnn_setup():
    seed(400)
    X, y = digit_images()
    model = SmallCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)}


@healthy("cnn_gradient_accumulation_done_right", "micro-batches of 16, gradients accumulated over 4 of them: "
         "zero_grad and step every 4th call, per-sample losses scaled by 1/4", cnn_setup)
def _(factory, steps):
    s = cnn_setup()
    model, opt = s["model"], s["optimizer"]
    stream, accumulate = batches(*s["data"], 16), 4
    cockpit = factory(model, opt)
    for step in range(steps):
        x, y = next(stream)
        if step % accumulate == 0:
            opt.zero_grad()
        out = model(x)
        cockpit.backward(ce(out, y) / accumulate)
        if (step + 1) % accumulate == 0:
            opt.step()
        cockpit.log_metrics(step, accuracy=accuracy(out, y))
    return cockpit


def probe_setup():
    seed(401)
    X, y = tabular("digits")
    model = MLP(64, (128, 64), 10)
    model.body.requires_grad_(False)  # stage one: the head alone
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3)}


@healthy("mlp_gradual_unfreezing", "head alone for 50 steps, then the body unfrozen on purpose (ULMFiT-style)",
         probe_setup)
def _(factory, steps):
    s = probe_setup()
    model = s["model"]

    def unfreeze(step):
        if step == 50:
            model.body.requires_grad_(True)
    return run_loop(factory, steps, model, s["optimizer"], batches(*s["data"], 64), ce, before_step=unfreeze)


def wine_setup(lr=0.05):
    seed(402)
    X, y = tabular("wine")
    model = MLP(13, (64, 32), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)}


@healthy("wine_sgdr_warm_restarts", "CosineAnnealingWarmRestarts(T_0=40) stepped per batch: the lr jumps back up "
         "every 40 steps by design", wine_setup)
def _(factory, steps):
    s = wine_setup()
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(s["optimizer"], T_0=40)
    return run_loop(factory, steps, s["model"], s["optimizer"], batches(*s["data"], 16), ce, scheduler=sched)


@healthy("digits_reduce_lr_on_plateau", "ReduceLROnPlateau on the running loss (patience 10, factor 0.3): the lr "
         "drops by itself when the loss stalls", lambda: probe_setup_full())
def _(factory, steps):
    s = probe_setup_full()
    opt = s["optimizer"]
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.3, patience=10)
    model, stream = s["model"], batches(*s["data"], 64)
    cockpit, running = factory(model, opt), None
    for step in range(steps):
        x, y = next(stream)
        opt.zero_grad()
        out = model(x)
        losses = ce(out, y)
        cockpit.backward(losses)
        opt.step()
        running = float(losses.mean()) if running is None else 0.9 * running + 0.1 * float(losses.mean())
        sched.step(running)
        cockpit.log_metrics(step, accuracy=accuracy(out, y))
    return cockpit


def probe_setup_full():
    seed(403)
    X, y = tabular("digits")
    model = MLP(64, (128, 64), 10)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)}


def imbalanced_setup():
    seed(404)
    X, y = tabular("digits")
    keep = (y >= 3) | (torch.arange(len(y)) % 6 == 0)  # digits 0-2 kept one in six
    X, y = X[keep], y[keep]
    model = MLP(64, (64,), 10)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3)}


class SamplerStream:
    """A WeightedRandomSampler drawing every class about equally often, with replacement."""

    def __init__(self, X, y, batch=32, seed_=0):
        counts = torch.bincount(y).float()
        weights = (1.0 / counts)[y]
        self.X, self.y, self.batch = X, y, batch
        self.sampler = torch.utils.data.WeightedRandomSampler(weights, num_samples=len(y), replacement=True,
                                                              generator=torch.Generator().manual_seed(seed_))
        self.it = iter(())

    def __next__(self):
        idx = []
        while len(idx) < self.batch:
            try:
                idx.append(next(self.it))
            except StopIteration:
                self.it = iter(self.sampler)
        idx = torch.tensor(idx)
        return self.X[idx], self.y[idx]


@healthy("digits_weighted_sampler_rare_classes", "three rare classes (1 in 6 kept) drawn by a WeightedRandomSampler: "
         "batches repeat rare samples", imbalanced_setup)
def _(factory, steps):
    s = imbalanced_setup()
    return run_loop(factory, steps, s["model"], s["optimizer"], SamplerStream(*s["data"]), ce)


def curriculum_setup():
    seed(405)
    ids, _, _, y = text_data(n=512, max_len=40, min_len=4, seed_=405)
    model = RNNText(cell="lstm")
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3)}


@healthy("lstm_length_curriculum_with_clipping", "short texts (<= 12 tokens) for 60 steps, then all lengths up to "
         "40; LSTM, clip_grad_norm_ 1.0", curriculum_setup)
def _(factory, steps):
    s = curriculum_setup()
    ids, y = s["data"]
    short = (ids != 0).sum(1) <= 12
    easy, full = batches(ids[short][:, :12], y[short], 32, seed_=1), batches(ids, y, 32, seed_=2)

    class Stream:
        step = 0

        def __next__(self):
            self.step += 1
            return next(easy if self.step <= 60 else full)
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce, clip=1.0)


def split_setup():
    seed(406)
    X, y = tabular("breast_cancer")
    (Xtr, ytr), test = split(X, y)
    model = MLP(30, (32,), 2, dropout=0.2)
    return {"model": model, "data": (Xtr, ytr), "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@healthy("breast_cancer_eval_every_20_steps", "evaluates on the test split every 20 steps (model.eval() under "
         "no_grad, then model.train() again), logging test accuracy as a metric", split_setup)
def _(factory, steps):
    s = split_setup()
    model, opt = s["model"], s["optimizer"]
    Xte, yte = s["test_data"]
    stream = batches(*s["data"], 32)
    cockpit = factory(model, opt)
    for step in range(steps):
        x, y = next(stream)
        opt.zero_grad()
        out = model(x)
        cockpit.backward(ce(out, y))
        opt.step()
        metrics = {"accuracy": accuracy(out, y)}
        if step % 20 == 0:
            model.eval()
            with torch.no_grad():
                metrics["test_accuracy"] = accuracy(model(Xte), yte)
            model.train()
        cockpit.log_metrics(step, **metrics)
    return cockpit


assert len({c["name"] for c in CASES}) == len(CASES)
