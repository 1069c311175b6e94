"""Training-phase faults switched on mid-run, on families the held-out sets lack."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_own import (  # noqa: E402
    AutoEncoder,
    DictDataset,
    F,
    MultiTask,
    NormCNN,
    TabEmbed,
    Tagger,
    dict_batches,
    digits_images,
    fault,
    hf_forward,
    keyword_text,
    logits_of,
    mlp,
    multitask_data,
    multitask_loss,
    nn,
    pixel_forward,
    seed,
    tabular_categorical,
    tagging,
    tiny_roberta,
    tiny_vit,
    torch,
)

CASES = []


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


def tag_loss(out, t):
    per_token = F.cross_entropy(out.transpose(1, 2), t, ignore_index=-100, reduction="none")
    return per_token.sum(1) / (t != -100).sum(1).clamp(min=1)


def tagger_setup(s):
    seed(s)
    ids, tags = tagging(seed_=s)
    model = Tagger()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    return ids, tags, model, opt


@fault(CASES, "gn_cnn_zero_grad_dropped", "missing_zero_grad", "loop", 60, 140,
       "a refactor moved opt.zero_grad() under `if step % log_every == 0` with log_every=1000")
def _():
    seed(0)
    X, y = digits_images()
    model = NormCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"zero_grad": lambda s: s < 60}}


@fault(CASES, "autoencoder_optimizer_step_forgotten", "missing_optimizer_step", "loop", 70, 140,
       "opt.step() ended up inside the `if step % eval_every == 0` block")
def _():
    seed(1)
    X, _ = digits_images()
    flat = X.flatten(1)
    model = AutoEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (flat, flat), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"do_step": lambda s: s < 70 or s % 500 == 0,
                      "loss": lambda o, t: F.mse_loss(o, t, reduction="none").mean(1), "metric": None}}


@fault(CASES, "tabular_clip_grad_norm_1e-6", "clipping_swallows_update", "loop", 60, 140,
       "max_norm read from a config field in scientific notation: 1e-6 instead of 1.0", where_also=["optimizer"])
def _():
    seed(2)
    X, y = tabular_categorical(seed_=2)
    model = TabEmbed()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"clip": lambda s: 1.0 if s < 60 else 1e-6}}


@fault(CASES, "vit_steplr_moved_into_batch_loop", "scheduler_per_batch", "optimizer", 5, 120,
       "StepLR(step_size=5 epochs, gamma=0.5) called inside the batch loop: the lr halves every 5 batches",
       where_also=["loop"])
def _():
    seed(3)
    X, y = digits_images()
    model = tiny_vit()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    return {"model": model, "data": (X, y), "loss_fn": lambda o, t: F.cross_entropy(logits_of(o), t),
            "optimizer": opt, "scheduler": sched, "_loop": {"forward": pixel_forward}}


@fault(CASES, "tagger_cosine_epochs_stepped_per_batch", "scheduler_per_batch", "optimizer", 0, 120,
       "CosineAnnealingLR(T_max=20 epochs) stepped every batch: the lr reaches 0 at step 20 and comes back",
       where_also=["loop"])
def _():
    ids, tags, model, opt = tagger_setup(4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    return {"model": model, "data": (ids, tags), "optimizer": opt, "scheduler": sched,
            "loss_fn": lambda o, t: F.cross_entropy(o.transpose(1, 2), t, ignore_index=-100),
            "_loop": {"loss": tag_loss, "metric": None}}


@fault(CASES, "tagger_lr_times_100_by_callback", "lr_spike", "optimizer", 80, 150,
       "a 'warm restart' callback multiplied the lr by 100 instead of restoring it", where_also=["loop"])
def _():
    ids, tags, model, opt = tagger_setup(5)
    return {"model": model, "data": (ids, tags), "optimizer": opt,
            "loss_fn": lambda o, t: F.cross_entropy(o.transpose(1, 2), t, ignore_index=-100),
            "_loop": {"loss": tag_loss, "metric": None, "before": lambda s: s == 80 and set_lr(opt, 0.2)}}


@fault(CASES, "multitask_trunk_frozen_mid_run", "layer_frozen_mid_run", "trunk", 70, 150,
       "a schedule meant to freeze the class head after warm-up froze the shared trunk instead",
       where_also=["trunk.0", "trunk.2"])
def _():
    seed(6)
    X, T = multitask_data(seed_=6)
    model = MultiTask(X.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (X, T), "loss_fn": multitask_loss, "optimizer": opt,
            "_loop": {"loss": lambda o, t: multitask_loss(o, t, "none"), "metric": None,
                      "before": lambda s: s == 70 and model.trunk.requires_grad_(False)}}


@fault(CASES, "digits_labels_shuffled_from_step_60", "labels_corrupted_mid_run", "data", 100, 180,
       "a second data shard's label column was joined in another order: labels random from step 100")
def _():
    seed(7)
    X, y = digits_images()
    model = NormCNN()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(7)

    def corrupt(step, batch):
        xb, yb = batch
        return (xb, yb[torch.randperm(len(yb), generator=g)]) if step >= 100 else batch
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": corrupt}}


class LogCounts(nn.Module):
    """log(x) of the count columns (the log1p was 'simplified' to log)."""

    def forward(self, x):
        return torch.cat([x[:, :2], torch.log(x[:, 2:4]), x[:, 4:]], 1)


@fault(CASES, "tabular_log_of_zero_count_from_step_50", "nan_produced", "logcounts", 50, 120,
       "count columns go through log(); a later shard has zero counts: -inf from the log module")
def _():
    seed(8)
    X, y = tabular_categorical(seed_=8)
    X = X.clone()
    X[:, 2:4] = X[:, 2:4].abs() + 0.5
    model = nn.Sequential()
    model.add_module("logcounts", LogCounts())
    model.add_module("net", TabEmbed())
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def zeros(step, batch):
        xb, yb = batch
        if step >= 50:
            xb = xb.clone()
            xb[0, 2] = 0.0
        return xb, yb
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": zeros}}


class RMSNorm(nn.Module):
    """RMS normalisation written without an epsilon."""

    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.scale * x / x.pow(2).mean(-1, keepdim=True).sqrt()


@fault(CASES, "rmsnorm_without_eps_on_blank_rows", "nan_produced", "norm", 60, 120,
       "an RMSNorm without eps; from step 60 the feed includes all-zero rows (a dead sensor): 0/0", )
def _():
    seed(9)
    X, y = digits_images()
    flat = X.flatten(1)
    model = nn.Sequential()
    model.add_module("norm", RMSNorm(64))
    model.add_module("mlp", mlp(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def blank(step, batch):
        xb, yb = batch
        if step >= 60:
            xb = xb.clone()
            xb[:2] = 0.0
        return xb, yb
    return {"model": model, "data": (flat, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": blank}}


@fault(CASES, "roberta_zero_grad_lost", "missing_zero_grad", "loop", 50, 120,
       "zero_grad moved into the eval branch of a HF-style loop", where_also=["optimizer"])
def _():
    seed(10)
    ids, mask, labels = keyword_text(seed_=10)
    ds = DictDataset(ids, mask, labels)
    model = tiny_roberta()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": {"stream": dict_batches(ds, 16), "forward": hf_forward, "zero_grad": lambda s: s < 50}}


@fault(CASES, "gn_cnn_head_frozen_mid_run", "layer_frozen_mid_run", "head", 60, 140,
       "a linear-probe helper called model.head.requires_grad_(False) on the live model at step 60")
def _():
    seed(11)
    X, y = digits_images()
    model = NormCNN()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"before": lambda s: s == 60 and model.head.requires_grad_(False)}}


@fault(CASES, "autoencoder_adam_lr_x100_at_80", "lr_spike", "optimizer", 80, 150,
       "a resumed run loaded the lr of a pretraining config (0.3 instead of 3e-3)", where_also=["loop"])
def _():
    seed(12)
    X, _ = digits_images()
    flat = X.flatten(1)
    model = AutoEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (flat, flat), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"loss": lambda o, t: F.mse_loss(o, t, reduction="none").mean(1), "metric": None,
                      "before": lambda s: s == 80 and set_lr(opt, 0.3)}}
