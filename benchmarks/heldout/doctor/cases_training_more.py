"""More training-phase faults, on CNNs, GRUs and a small transformer, written into the loop the way they happen."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import (  # noqa: E402
    RNNText,
    SmallCNN,
    TinyTransformer,
    accuracy,
    batches,
    ce,
    digit_images,
    nn,
    run_loop,
    seed,
    tabular,
    text_data,
    torch,
)

CASES = []
STEPS = 160


def fault(name, cause, where, onset, build, note, where_also=None, steps=STEPS):
    def register(train):
        CASES.append({"name": name, "kind": "bug", "phase": "training", "cause": cause, "where": where,
                      "where_also": where_also or [], "onset": onset, "steps": steps, "build": build,
                      "train": train, "note": note})
        return train
    return register


def cnn_setup(lr=0.03):
    seed(20)
    X, y = digit_images()
    model = SmallCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)}


@fault("cnn_accumulation_zero_grad_every_4_step_every_1", "missing_zero_grad", "loop", 60, cnn_setup,
       "gradient accumulation switched on at step 60: zero_grad every 4 micro-batches, but opt.step() every one")
def _(factory, steps):
    s = cnn_setup()
    model, opt = s["model"], s["optimizer"]
    stream = batches(*s["data"], 64)
    cockpit = factory(model, opt)
    accumulate = 1
    for step in range(steps):
        if step == 60:
            accumulate = 4
        x, y = next(stream)
        if step % accumulate == 0:
            opt.zero_grad()
        out = model(x)
        cockpit.backward(ce(out, y))
        opt.step()  # belongs under `if (step + 1) % accumulate == 0`
        cockpit.log_metrics(step, accuracy=accuracy(out, y))
    return cockpit


def gru_setup():
    seed(21)
    ids, _, _, y = text_data(n=512, seed_=21)
    model = RNNText(cell="gru")
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3)}


@fault("gru_step_indented_under_logging", "missing_optimizer_step", "loop", 50, gru_setup,
       "a refactor at step 50 indents opt.step() under `if step % 25 == 0:` (the logging branch)")
def _(factory, steps):
    s = gru_setup()
    model, opt = s["model"], s["optimizer"]
    stream = batches(*s["data"], 32)
    cockpit = factory(model, opt)
    for step in range(steps):
        x, y = next(stream)
        opt.zero_grad()
        out = model(x)
        cockpit.backward(ce(out, y))
        if step < 50:
            opt.step()
        elif step % 25 == 0:
            opt.step()
        cockpit.log_metrics(step, accuracy=accuracy(out, y))
    return cockpit


def transformer_setup():
    seed(22)
    ids, _, _, y = text_data(n=512, max_len=16, seed_=22)
    model = TinyTransformer()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)}


@fault("transformer_clip_grad_value_1e-6", "clipping_swallows_update", "loop", 30, transformer_setup,
       "clip_grad_value_(params, 1e-6) added at step 30 (a norm of 1.0 was meant) in a plain-SGD run: "
       "nothing moves", where_also=["optimizer"])
def _(factory, steps):
    s = transformer_setup()
    model = s["model"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stream = batches(*s["data"], 32)
    cockpit = factory(model, opt)
    for step in range(steps):
        x, y = next(stream)
        opt.zero_grad()
        out = model(x)
        cockpit.backward(ce(out, y))
        if step >= 30:
            nn.utils.clip_grad_value_(model.parameters(), 1e-6)
        opt.step()
        cockpit.log_metrics(step, accuracy=accuracy(out, y))
    return cockpit


@fault("gru_epoch_boundary_lr_factor_bug", "lr_spike", "optimizer", 64, gru_setup,
       "a hand-written schedule's epoch factor is 50x for one epoch (steps 64-79) from an off-by-one")
def _(factory, steps):
    s = gru_setup()
    opt = s["optimizer"]
    base = opt.param_groups[0]["lr"]

    def schedule(step):
        epoch = step // 16
        factor = 50.0 if epoch == 4 else 0.97 ** epoch
        for group in opt.param_groups:
            group["lr"] = base * factor
    return run_loop(factory, steps, s["model"], opt, batches(*s["data"], 32), ce, before_step=schedule)


@fault("gru_new_source_class_order_differs", "labels_corrupted_mid_run", "data", 80, gru_setup,
       "from step 80 a second source whose class ids follow another order (0->2, 1->0, 2->1)")
def _(factory, steps):
    s = gru_setup()
    ids, y = s["data"]
    remap = torch.tensor([2, 0, 1])
    first, second = batches(ids, y, 32, seed_=1), batches(ids, remap[y], 32, seed_=2)

    class Stream:
        step = 0

        def __next__(self):
            self.step += 1
            return next(first if self.step <= 80 else second)
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


class PerImageStandardise(nn.Module):
    """(x - mean) / std per image, written by hand without a floor on std: a blank image gives 0/0."""

    def forward(self, x):
        mean = x.mean((1, 2, 3), keepdim=True)
        std = x.std((1, 2, 3), keepdim=True)
        return (x - mean) / std


class StdCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.standardise = PerImageStandardise()
        self.cnn = SmallCNN()

    def forward(self, x):
        return self.cnn(self.standardise(x))


def std_cnn_setup():
    seed(23)
    X, y = tabular("digits")
    model = StdCNN()
    return {"model": model, "data": (X.reshape(-1, 1, 8, 8), y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3)}


@fault("cnn_blank_scan_into_per_image_standardisation", "nan_produced", "standardise", 90, std_cnn_setup,
       "from step 90 the scanner feed has blank pages: per-image standardisation divides 0 by 0")
def _(factory, steps):
    s = std_cnn_setup()
    stream = batches(*s["data"], 64)

    class Stream:
        step = 0

        def __next__(self):
            x, y = next(stream)
            if self.step >= 90:
                x = x.clone()
                x[7] = 0.0
            self.step += 1
            return x, y
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


@fault("cnn_freeze_bn_helper_freezes_conv2", "layer_frozen_mid_run", "conv2", 50, lambda: cnn_setup(0.05),
       "a 'freeze BatchNorm after warm-up' helper at step 50 freezes conv2 instead of bn2")
def _(factory, steps):
    s = cnn_setup(0.05)
    model = s["model"]

    def freeze(step):
        if step == 50:
            model.conv2.requires_grad_(False)
    return run_loop(factory, steps, model, s["optimizer"], batches(*s["data"], 64), ce, before_step=freeze)


def digits_deep_setup():
    seed(24)
    X, y = tabular("digits")
    layers = []
    for _ in range(4):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(64, 10))
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)}


@fault("deep_mlp_lr_raised_after_plateau", "lr_spike", "optimizer", 70, digits_deep_setup,
       "at step 70 someone 'kicks' a plateau by setting lr=10.0 on a deep plain ReLU MLP")
def _(factory, steps):
    s = digits_deep_setup()
    opt = s["optimizer"]

    def kick(step):
        if step == 70:
            for group in opt.param_groups:
                group["lr"] = 10.0
    return run_loop(factory, steps, s["model"], opt, batches(*s["data"], 64), ce, before_step=kick)


assert len({c["name"] for c in CASES}) == len(CASES)
