"""Training-phase faults of the third held-out set: each recipe trains healthily and a fault is switched on at
`onset`, well inside the run. `build()` is the set-up before the fault. Written without reading activis's code."""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_v3 import (  # noqa: E402
    GNCNN,
    VAE,
    AutoEncoder,
    MultiTask,
    Net,
    PoissonOffset,
    Siamese,
    TabEmbed,
    TETagger,
    categorical_table,
    coral_accuracy,
    coral_loss,
    coral_rows,
    count_table,
    dict_batches,
    dict_forward,
    digit_pairs,
    digits_flat01,
    digits_images,
    fault,
    hf_ce,
    image_items,
    keyword_text,
    multitask_accuracy,
    multitask_data,
    multitask_loss,
    multitask_rows,
    ordinal_table,
    poisson_loss,
    poisson_rows,
    seed,
    skewed_regression,
    tag_accuracy,
    tag_loss,
    tag_rows,
    tagging,
    text_items,
    tiny_roberta,
    tiny_vit,
    vae_loss,
    vae_rows,
)

CASES = []
T = CASES


def reg_rows(out, y):
    return F.mse_loss(out.reshape(y.shape), y, reduction="none").reshape(len(y), -1).mean(1)


def set_lr_at(opt, step_at, value=None, factor=None):
    def before(step):
        if step == step_at:
            for group in opt.param_groups:
                group["lr"] = value if value is not None else group["lr"] * factor
    return before


def freeze_at(module, step_at):
    def before(step):
        if step == step_at:
            for p in module.parameters():
                p.requires_grad_(False)
    return before


# ---------------------------------------------------------------- the loop

@fault(T, "gn_cnn_zero_grad_dropped_after_refactor", "missing_zero_grad", "loop", 60, 160,
       "the loop was refactored into train_one_step(); opt.zero_grad() stayed behind in the old code path from step 60")
def _():
    seed(0)
    model = GNCNN()
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "zero_grad": lambda s: s < 60}}


@fault(T, "tab_embed_zero_grad_only_on_log_steps", "missing_zero_grad", "loop", 80, 200,
       "from step 80, zero_grad() moved under `if step % 50 == 0:` with the logging")
def _():
    seed(1)
    model = TabEmbed()
    return {"model": model, "data": categorical_table(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
            "_loop": {"batch": 32, "zero_grad": lambda s: s < 80 or s % 50 == 0}}


@fault(T, "roberta_zero_grad_lost_in_trainer_subclass", "missing_zero_grad", "loop", 50, 120,
       "a custom trainer's training_step override (in use from step 50) drops the optimizer.zero_grad() call")
def _():
    seed(2)
    model = tiny_roberta()
    ds = text_items(seed_=2)
    return {"model": model, "data": ds, "loss_fn": hf_ce,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01),
            "_loop": {"stream": dict_batches(ds, 16), "forward": dict_forward, "zero_grad": lambda s: s < 50}}


@fault(T, "autoencoder_step_commented_out_for_profiling", "missing_optimizer_step", "loop", 70, 180,
       "optimizer.step() commented out at step 70 to profile the backward pass and never put back")
def _():
    seed(3)
    X, _y = digits_flat01()
    model = AutoEncoder()
    return {"model": model, "data": (X, X.clone()), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 64, "loss": reg_rows, "metric": None, "do_step": lambda s: s < 70}}


@fault(T, "siamese_step_behind_scaler_flag", "missing_optimizer_step", "loop", 60, 160,
       "after switching to a GradScaler code path (flag set at step 60) the step is `if use_amp: scaler.step(opt)` "
       "with the scaler never created: nothing steps")
def _():
    seed(4)
    model = Siamese()
    return {"model": model, "data": digit_pairs(seed_=6), "loss_fn": nn.BCEWithLogitsLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": lambda o, y: F.binary_cross_entropy_with_logits(o, y, reduction="none"),
                      "metric": None, "do_step": lambda s: s < 60}}


@fault(T, "te_tagger_clip_norm_1e-6_from_config", "clipping_swallows_update", "loop", 60, 180,
       "a config reload at step 60 sets max_grad_norm to 1e-6 (a unit mix-up with an epsilon)",
       where_also=["optimizer"])
def _():
    seed(5)
    model = TETagger()
    return {"model": model, "data": tagging(seed_=5), "loss_fn": tag_loss,
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            "_loop": {"batch": 32, "loss": tag_rows, "metric": tag_accuracy,
                      "clip": lambda s: 1.0 if s < 60 else 1e-6}}


@fault(T, "poisson_clip_norm_1e-7_after_warm_phase", "clipping_swallows_update", "loop", 80, 200,
       "clip_grad_norm_(max_norm=1e-7) switched on after a warm phase of 80 steps (meant clip_grad_value 10)",
       where_also=["optimizer"])
def _():
    seed(6)
    model = Net(8, (32, 32))
    return {"model": model, "data": count_table(seed_=4), "loss_fn": poisson_loss,
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
            "_loop": {"batch": 32, "loss": poisson_rows, "metric": None,
                      "clip": lambda s: None if s < 80 else 1e-7}}


@fault(T, "multitask_cosine_epochs_stepped_per_batch", "scheduler_per_batch", "loop", 112, 220,
       "CosineAnnealingLR(T_max=10 epochs) stepped once per epoch of 56 batches, then every batch from step 112 "
       "(scheduler.step() moved into the batch loop)", where_also=["optimizer"])
def _():
    seed(7)
    model = MultiTask()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "data": multitask_data(), "loss_fn": multitask_loss, "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10),
            "_loop": {"batch": 32, "loss": multitask_rows, "metric": multitask_accuracy,
                      "sched_step": lambda s: s >= 112 or (s + 1) % 56 == 0}}


@fault(T, "ordinal_exponential_lr_moved_into_batch_loop", "scheduler_per_batch", "loop", 75, 180,
       "ExponentialLR(gamma=0.8) stepped at each epoch end (25 batches), then every batch from step 75",
       where_also=["optimizer"])
def _():
    seed(8)
    model = Net(10, (64,), d_out=4)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": ordinal_table(seed_=3), "loss_fn": coral_loss, "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.ExponentialLR(opt, 0.8),
            "_loop": {"batch": 32, "loss": coral_rows, "metric": coral_accuracy,
                      "sched_step": lambda s: s >= 75 or (s + 1) % 25 == 0}}


@fault(T, "gn_cnn_lr_times_100_by_callback", "lr_spike", "optimizer", 90, 180,
       "a 'warm restart' callback multiplies the learning rate by 100 at step 90 (meant to divide)",
       where_also=["loop"])
def _():
    seed(9)
    model = GNCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch": 32, "before": set_lr_at(opt, 90, factor=100.0)}}


@fault(T, "vae_lr_overwritten_on_resume", "lr_spike", "optimizer", 70, 180,
       "resuming from a checkpoint at step 70 writes lr=0.5 (the old SGD config) into the Adam param groups",
       where_also=["loop"])
def _():
    seed(10)
    X, _y = digits_flat01()
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return {"model": model, "data": (X, X.clone()), "loss_fn": vae_loss, "optimizer": opt,
            "_loop": {"batch": 64, "loss": vae_rows, "metric": None, "before": set_lr_at(opt, 70, value=0.5)}}


# ---------------------------------------------------------------- layers and labels

@fault(T, "te_tagger_encoder_frozen_instead_of_embedding", "layer_frozen_mid_run", "encoder", 80, 200,
       "at step 80 'freeze the embeddings' froze model.encoder instead (wrong attribute in the freeze helper)",
       where_also=["encoder.layers.0", "encoder.layers.1"])
def _():
    seed(11)
    model = TETagger()
    return {"model": model, "data": tagging(seed_=11), "loss_fn": tag_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": tag_rows, "metric": tag_accuracy, "before": freeze_at(model.encoder, 80)}}


@fault(T, "autoencoder_decoder_frozen_by_unfreeze_schedule", "layer_frozen_mid_run", "decoder", 70, 180,
       "a gradual-unfreezing schedule with its list reversed freezes the decoder at step 70",
       where_also=["decoder.0", "decoder.2"])
def _():
    seed(12)
    X, _y = digits_flat01()
    model = AutoEncoder()
    return {"model": model, "data": (X, X.clone()), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 64, "loss": reg_rows, "metric": None, "before": freeze_at(model.decoder, 70)}}


@fault(T, "vit_encoder_frozen_at_warmup_end", "layer_frozen_mid_run", "vit.layers", 60, 150,
       "a 'freeze the patch embeddings after warm-up' callback froze model.vit.layers (the encoder blocks) at step 60",
       where_also=["vit.layers.0", "vit.layers.1", "vit"])
def _():
    seed(13)
    model = tiny_vit()
    ds = image_items()
    return {"model": model, "data": ds, "loss_fn": hf_ce,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01),
            "_loop": {"stream": dict_batches(ds, 32), "forward": dict_forward,
                      "before": freeze_at(model.vit.layers, 60)}}


def shuffle_labels_from(step_at, seed_):
    g = torch.Generator().manual_seed(seed_)

    def batch_fn(step, batch):
        x, y = batch
        return (x, y[torch.randperm(len(y), generator=g)]) if step >= step_at else (x, y)
    return batch_fn


@fault(T, "tab_embed_labels_misaligned_new_shard", "labels_corrupted_mid_run", "data", 100, 240,
       "from step 100 a new shard's label file is joined on row order after a sort: labels no longer match rows")
def _():
    seed(14)
    model = TabEmbed()
    return {"model": model, "data": categorical_table(seed_=6), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "batch_fn": shuffle_labels_from(100, 14)}}


@fault(T, "gn_cnn_second_source_class_ids_offset", "labels_corrupted_mid_run", "data", 90, 200,
       "from step 90 batches come from a second source whose class ids are offset by 3 (a different label map)")
def _():
    seed(15)
    model = GNCNN()
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "batch_fn": lambda s, b: (b[0], (b[1] + 3) % 10) if s >= 90 else b}}


# ---------------------------------------------------------------- NaN / Inf producers

class Unlog(nn.Module):
    """The first column was exported as log(income); the model turns it back into income (in units of 10k)."""

    def forward(self, x):
        return torch.cat([torch.exp(x[:, :1]) / 10.0, x[:, 1:]], 1)


class IncomeNet(nn.Module):
    def __init__(self, d=10):
        super().__init__()
        self.unlog = Unlog()
        self.body = nn.Sequential(nn.Linear(d, 48), nn.ReLU(), nn.Linear(48, 48), nn.ReLU())
        self.head = nn.Linear(48, 1)

    def forward(self, x):
        return self.head(self.body(self.unlog(x)))


def income_table(seed_=3):
    X, y = skewed_regression(seed_=seed_)
    X = X.clone()
    X[:, 0] = torch.log(torch.exp(X[:, 0] * 0.5) * 5.0)  # log of an income of 5 * e^(z/2) tens of thousands
    return X, y


def raw_income_from(step_at):
    def batch_fn(step, batch):
        if step < step_at:
            return batch
        x = batch[0].clone()
        x[:4, 0] = torch.exp(x[:4, 0]) * 1e4  # the new export's rows carry the income itself, not its log
        return x, batch[1]
    return batch_fn


@fault(T, "unlog_feature_exp_overflow_on_new_export", "nan_produced", "unlog", 80, 160,
       "the model exponentiates a log(income) column; from step 80 a new export sends raw incomes (~50,000) in some "
       "rows and exp overflows to inf")
def _():
    seed(16)
    model = IncomeNet()
    return {"model": model, "data": income_table(), "loss_fn": lambda o, t: F.mse_loss(o.squeeze(1), t),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": reg_rows, "metric": None, "batch_fn": raw_income_from(80)}}


class HandL2Norm(nn.Module):
    """Unit-length rows, written by hand without an epsilon."""

    def forward(self, x):
        return x / x.norm(dim=1, keepdim=True)


class PairTextCosine(nn.Module):
    """Bag-of-embeddings for each text of a pair (masked mean), a bias-free projection, cosine similarity by hand."""

    def __init__(self, vocab=80, dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.l2norm = HandL2Norm()
        self.scale = nn.Parameter(torch.tensor(5.0))

    def encode(self, ids):
        keep = (ids != 0).float().unsqueeze(-1)
        return self.l2norm(self.proj((self.emb(ids) * keep).sum(1) / keep.sum(1).clamp(min=1)))

    def forward(self, pairs):
        return self.scale * (self.encode(pairs[:, 0]) * self.encode(pairs[:, 1])).sum(1)


def text_pairs(n=800, seed_=0):
    ids, _mask, labels = keyword_text(n=n, seed_=seed_)
    g = np.random.default_rng(seed_)
    partner = g.permutation(n)
    return torch.stack([ids, ids[partner]], 1), (labels == labels[partner]).float()


def empty_texts_from(step_at):
    def batch_fn(step, batch):
        if step < step_at:
            return batch
        x = batch[0].clone()
        x[:3, 1] = 0  # texts that were all stop words are empty after the new tokenizer's filtering
        return x, batch[1]
    return batch_fn


@fault(T, "pair_text_cosine_by_hand_meets_empty_text", "nan_produced", "l2norm", 70, 160,
       "from step 70 a new stop-word filter empties a few texts; the hand-written x / x.norm() divides 0 by 0")
def _():
    seed(17)
    model = PairTextCosine()
    X, y = text_pairs()
    return {"model": model, "data": (X, y), "loss_fn": nn.BCEWithLogitsLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3),
            "_loop": {"batch": 32, "loss": lambda o, t: F.binary_cross_entropy_with_logits(o, t, reduction="none"),
                      "metric": None, "batch_fn": empty_texts_from(70)}}


class SqrtDistance(nn.Module):
    """Feature engineering inside the model: sqrt of the first column (a squared distance, never negative... until
    a new source sends it centred)."""

    def forward(self, x):
        return torch.cat([torch.sqrt(x[:, :1]), x[:, 1:]], 1)


@fault(T, "sqrt_feature_meets_centred_source", "nan_produced", "pre", 70, 160,
       "the model takes sqrt of a squared-distance column; from step 70 a second source delivers that column "
       "standardised (half of it negative)")
def _():
    seed(18)
    X, y = skewed_regression(seed_=4)
    X = X.clone()
    X[:, 0] = X[:, 0] ** 2
    model = Net(10, (48, 48), pre=SqrtDistance())

    def batch_fn(step, batch):
        if step < 70:
            return batch
        x = batch[0].clone()
        x[:, 0] = x[:, 0] - x[:, 0].mean() * 2
        return x, batch[1]
    return {"model": model, "data": (X, y), "loss_fn": lambda o, t: F.mse_loss(o.squeeze(1), t),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": reg_rows, "metric": None, "batch_fn": batch_fn}}


@fault(T, "poisson_offset_meets_zero_exposure", "nan_produced", "log_exposure", 90, 180,
       "from step 90 policies cancelled on their first day (exposure 0) reach the data; log(exposure) is -inf")
def _():
    seed(19)
    model = PoissonOffset()

    def batch_fn(step, batch):
        if step < 90:
            return batch
        x = batch[0].clone()
        x[:2, -1] = 0.0
        return x, batch[1]
    return {"model": model, "data": count_table(exposure=True, seed_=5), "loss_fn": poisson_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": poisson_rows, "metric": None, "batch_fn": batch_fn}}


class HandSoftmax(nn.Module):
    """exp(x) / sum(exp(x)) without subtracting the max."""

    def forward(self, x):
        e = torch.exp(x)
        return e / e.sum(1, keepdim=True)


class HandSoftmaxNet(nn.Module):
    def __init__(self, d=10, classes=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 64), nn.ReLU())
        self.head = nn.Linear(64, classes)
        self.softmax = HandSoftmax()

    def forward(self, x):
        return self.softmax(self.head(self.body(x)))


def prob_nll_rows(p, y):
    return -torch.log(p.gather(1, y[:, None]).squeeze(1) + 1e-12)


@fault(T, "hand_softmax_overflow_after_unit_change", "nan_produced", "softmax", 80, 160,
       "a hand-written softmax (no max subtracted); from step 80 the features arrive in centimetres instead of metres "
       "(x100) and exp overflows: inf / inf")
def _():
    seed(20)
    model = HandSoftmaxNet()
    return {"model": model, "data": ordinal_table(seed_=4), "loss_fn": lambda p, y: prob_nll_rows(p, y).mean(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3),
            "_loop": {"batch": 32, "loss": prob_nll_rows,
                      "batch_fn": lambda s, b: (b[0] * 100, b[1]) if s >= 80 else b}}
