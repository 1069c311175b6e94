"""Training-phase faults: switched on at `onset` in a watched run, the way a practitioner's loop goes wrong.

Each case's `build()` is the set-up before the fault; `train(cockpit_factory, steps)` runs the loop."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import (  # noqa: E402
    MLP,
    DictDataset,
    F,
    RNNText,
    SmallCNN,
    accuracy,
    batches,
    ce,
    dict_batches,
    digit_images,
    hf_forward,
    nn,
    run_loop,
    seed,
    tabular,
    text_data,
    tiny_bert,
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


def digits_mlp(lr=0.05, momentum=0.9, seed_=0):
    seed(seed_)
    X, y = tabular("digits")
    model = MLP(64, (128, 64), 10)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


def _phase_two(cockpit, model, opt, stream, start, steps, zero_grad=True, step_opt=True, clip=None,
               sched=None):
    """The second phase of a two-phase script, copied from the first with one line lost."""
    for step in range(start, steps):
        x, y = next(stream)
        if zero_grad:
            opt.zero_grad()
        out = model(x)
        cockpit.backward(ce(out, y))
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        if step_opt:
            opt.step()
        elif sched is not None:
            sched.step()
        cockpit.log_metrics(step, accuracy=accuracy(out, y))


def _phase_one(factory, setup, onset, stream):
    model, opt = setup["model"], setup["optimizer"]
    return run_loop(factory, onset, model, opt, stream, ce)


@fault("digits_phase_two_without_zero_grad", "missing_zero_grad", "loop", 80, lambda: digits_mlp(lr=0.02),
       "phase-two loop (after a checkpoint reload) copied without opt.zero_grad(): gradients pile up")
def _(factory, steps):
    s = digits_mlp(lr=0.02)
    stream = batches(*s["data"], 64)
    cockpit = _phase_one(factory, s, 80, stream)
    _phase_two(cockpit, s["model"], s["optimizer"], stream, 80, steps, zero_grad=False)
    return cockpit


@fault("digits_phase_two_scheduler_instead_of_step", "missing_optimizer_step", "loop", 80, digits_mlp,
       "phase two calls scheduler.step() where opt.step() belonged: the weights stop changing")
def _(factory, steps):
    s = digits_mlp()
    stream = batches(*s["data"], 64)
    sched = torch.optim.lr_scheduler.ExponentialLR(s["optimizer"], 0.999)
    cockpit = _phase_one(factory, s, 80, stream)
    _phase_two(cockpit, s["model"], s["optimizer"], stream, 80, steps, step_opt=False, sched=sched)
    return cockpit


@fault("digits_clip_norm_1e-4", "clipping_swallows_update", "loop", 70, digits_mlp,
       "gradient clipping added at step 70 with max_norm=1e-4 (meant 1.0): every update shrinks to nothing",
       where_also=["optimizer"])
def _(factory, steps):
    s = digits_mlp()
    stream = batches(*s["data"], 64)
    cockpit = _phase_one(factory, s, 70, stream)
    _phase_two(cockpit, s["model"], s["optimizer"], stream, 70, steps, clip=1e-4)
    return cockpit


def wine_adam():
    seed(3)
    X, y = tabular("wine")
    model = MLP(13, (64, 32), 3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


@fault("wine_steplr_stepped_per_batch", "scheduler_per_batch", "optimizer", 20, wine_adam,
       "StepLR(step_size=20, gamma=0.1) meant per epoch, stepped every batch: lr 1e-3x by step 60",
       where_also=["loop"])
def _(factory, steps):
    s = wine_adam()
    sched = torch.optim.lr_scheduler.StepLR(s["optimizer"], step_size=20, gamma=0.1)
    return run_loop(factory, steps, s["model"], s["optimizer"], batches(*s["data"], 16), ce, scheduler=sched)


def cnn_setup(lr=0.05):
    seed(4)
    X, y = digit_images()
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


@fault("cnn_cosine_tmax_in_epochs_stepped_per_batch", "scheduler_per_batch", "optimizer", 0, cnn_setup,
       "CosineAnnealingLR(T_max=epochs=6) stepped every batch: the lr cycles to 0 every 6 steps",
       where_also=["loop"])
def _(factory, steps):
    s = cnn_setup()
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(s["optimizer"], T_max=6)
    return run_loop(factory, steps, s["model"], s["optimizer"], batches(*s["data"], 64), ce, scheduler=sched)


@fault("digits_restart_lr_times_100", "lr_spike", "optimizer", 90, digits_mlp,
       "a warm restart sets lr = base_lr * 100 (the multiplier meant for a 100x smaller base)")
def _(factory, steps):
    s = digits_mlp()
    opt = s["optimizer"]

    def restart(step):
        if step == 90:
            for group in opt.param_groups:
                group["lr"] = group["lr"] * 100
    return run_loop(factory, steps, s["model"], opt, batches(*s["data"], 64), ce, before_step=restart)


def gru_setup():
    seed(5)
    ids, _, _, y = text_data(n=512)
    model = RNNText(cell="gru")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


@fault("gru_freezes_rnn_instead_of_embedding", "layer_frozen_mid_run", "rnn", 40, gru_setup,
       "'freeze the embeddings after 40 steps' written as model.rnn.requires_grad_(False)")
def _(factory, steps):
    s = gru_setup()
    model = s["model"]

    def freeze(step):
        if step == 40:
            model.rnn.requires_grad_(False)
    return run_loop(factory, steps, model, s["optimizer"], batches(*s["data"], 32), ce, before_step=freeze)


def bert_setup():
    seed(6)
    ids, _, mask, y = text_data(n=256, max_len=16)
    model = tiny_bert()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": DictDataset(ids, mask, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


@fault("bert_freezes_encoder_at_unfreeze_step", "layer_frozen_mid_run", "bert.encoder", 50, bert_setup,
       "a gradual-unfreezing schedule inverted: at step 50 the encoder is frozen instead of unfrozen",
       steps=120)
def _(factory, steps):
    s = bert_setup()
    model = s["model"]

    def freeze(step):
        if step == 50:
            for p in model.bert.encoder.parameters():
                p.requires_grad = False
    return run_loop(factory, steps, model, s["optimizer"], dict_batches(s["data"], 16), ce, before_step=freeze,
                    forward=hf_forward)


@fault("cnn_second_shard_labels_off_by_one", "labels_corrupted_mid_run", "data", 80, lambda: cnn_setup(0.03),
       "the second data shard was written with labels shifted by one class")
def _(factory, steps):
    s = cnn_setup(0.03)
    X, y = s["data"]
    clean, shifted = batches(X, y, 64, seed_=1), batches(X, (y + 1) % 10, 64, seed_=2)

    class Stream:
        step = 0

        def __next__(self):
            self.step += 1
            return next(clean if self.step <= 80 else shifted)
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


@fault("wine_labels_shuffled_after_resample", "labels_corrupted_mid_run", "data", 70, wine_adam,
       "a class-balancing resampler from step 70 permutes the labels on their own")
def _(factory, steps):
    s = wine_adam()
    X, y = s["data"]
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(9))
    clean, broken = batches(X, y, 16, seed_=1), batches(X, y[perm], 16, seed_=2)

    class Stream:
        step = 0

        def __next__(self):
            self.step += 1
            return next(clean if self.step <= 70 else broken)
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


class RowNormalise(nn.Module):
    """Scales each row to unit length: 0/0 on an all-zero row."""

    def forward(self, x):
        return x / x.norm(dim=1, keepdim=True)


def digits_rownorm():
    seed(7)
    X, y = tabular("digits")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = RowNormalise()
            self.mlp = MLP(64, (64,), 10)

        def forward(self, x):
            return self.mlp(self.scale(x) * 8)
    model = Net()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@fault("digits_zero_row_into_row_normalisation", "nan_produced", "scale", 90, digits_rownorm,
       "from step 90 the loader yields some blank scans; x / x.norm() makes NaN in 'scale'")
def _(factory, steps):
    s = digits_rownorm()
    X, y = s["data"]
    stream = batches(X, y, 64)

    def with_blank(step):
        if step >= 90:
            xb, yb = next(stream)
            xb = xb.clone()
            xb[0] = 0.0
            return xb, yb
        return next(stream)

    class Stream:
        step = 0

        def __next__(self):
            self.step += 1
            return with_blank(self.step - 1)
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


class MaskedAttentionPool(nn.Module):
    """Attention pooling over the real tokens: pads get -inf before the softmax."""

    def __init__(self, hidden):
        super().__init__()
        self.score = nn.Linear(hidden, 1)

    def forward(self, h, mask):
        s = self.score(h).squeeze(2).masked_fill(~mask, float("-inf"))
        return (torch.softmax(s, 1).unsqueeze(2) * h).sum(1)


class AttnGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32, padding_idx=0)
        self.gru = nn.GRU(32, 48, batch_first=True)
        self.pool = MaskedAttentionPool(48)
        self.head = nn.Linear(48, 3)

    def forward(self, ids):
        h, _ = self.gru(self.emb(ids))
        return self.head(self.pool(h, ids != 0))


def attn_gru_setup():
    seed(8)
    ids, _, _, y = text_data(n=512)
    model = AttnGRU()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3)}


@fault("gru_empty_text_into_masked_softmax", "nan_produced", "pool", 100, attn_gru_setup,
       "from step 100 the new data source has empty texts: a softmax over all -inf gives NaN in 'pool'")
def _(factory, steps):
    s = attn_gru_setup()
    ids, y = s["data"]
    stream = batches(ids, y, 32)

    class Stream:
        step = 0

        def __next__(self):
            xb, yb = next(stream)
            if self.step >= 100:
                xb = xb.clone()
                xb[3] = 0
            self.step += 1
            return xb, yb
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


class LogCounts(nn.Module):
    """log of count features, written as torch.log (the counts were always >= 1 in the first shard)."""

    def forward(self, x):
        return torch.log(x)


def counts_setup():
    seed(9)
    g = torch.Generator().manual_seed(9)
    rate = torch.rand(1024, 12, generator=g) * 20 + 1
    X = torch.poisson(rate, generator=g).clamp(min=1)
    y = (rate[:, :4].sum(1) > rate[:, 4:8].sum(1)).long()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.logf = LogCounts()
            self.mlp = MLP(12, (32,), 2)

        def forward(self, x):
            return self.mlp(self.logf(x))
    model = Net()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3)}


@fault("counts_zero_count_into_log", "nan_produced", "logf", 75, counts_setup,
       "a later shard has zero counts: torch.log gives -inf in 'logf', NaN after the first Linear")
def _(factory, steps):
    s = counts_setup()
    X, y = s["data"]
    stream = batches(X, y, 32)

    class Stream:
        step = 0

        def __next__(self):
            xb, yb = next(stream)
            if self.step >= 75:
                xb = xb.clone()
                xb[5, 2] = 0.0
            self.step += 1
            return xb, yb
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


class IRNN(nn.Module):
    """A ReLU RNN with identity-initialised recurrence (Le et al., 2015), reading a long signal."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.rnn = nn.RNN(1, 64, nonlinearity="relu", batch_first=True)
        nn.init.eye_(self.rnn.weight_hh_l0)
        with torch.no_grad():
            self.rnn.weight_hh_l0.mul_(scale)
        self.head = nn.Linear(64, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def irnn_data(length, n=512, seed_=10):
    g = torch.Generator().manual_seed(seed_)
    x = torch.randn(n, length, 1, generator=g)
    y = (x[:, -5:, 0].sum(1) > 0).long()
    return x, y


def irnn_setup():
    seed(10)
    model = IRNN(scale=1.03)
    return {"model": model, "data": irnn_data(10), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)}


@fault("irnn_curriculum_to_long_sequences", "exploding_gradients", "rnn", 60, irnn_setup,
       "curriculum step at 60: sequences grow from 10 to 120 steps through a slightly expansive IRNN, "
       "no clipping")
def _(factory, steps):
    s = irnn_setup()
    short, long_ = batches(*irnn_data(10), 32), batches(*irnn_data(120, seed_=11), 32)

    class Stream:
        step = 0

        def __next__(self):
            self.step += 1
            return next(short if self.step <= 60 else long_)
    return run_loop(factory, steps, s["model"], s["optimizer"], Stream(), ce)


_ = (F,)
assert len({c["name"] for c in CASES}) == len(CASES)
