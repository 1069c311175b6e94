"""Healthy recipes of the third held-out set: each has `build` (a checkup must stay silent) and `train` (a watched run
must stay silent). Written without reading activis's code."""

import copy
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_v3 import (  # noqa: E402
    GNCNN,
    MDN,
    VAE,
    AutoEncoder,
    BiLSTMTagger,
    Embedder,
    GNResNet,
    Heteroscedastic,
    MultiTask,
    Net,
    PoissonOffset,
    ResidualMLP,
    Siamese,
    TabEmbed,
    TEClassifier,
    TETagger,
    TiedLM,
    TinyConvNeXt,
    batch_hard_triplet_loss,
    batch_hard_triplet_rows,
    categorical_table,
    contrastive_loss,
    contrastive_rows,
    coral_accuracy,
    coral_loss,
    coral_rows,
    count_table,
    dict_batches,
    dict_forward,
    digit_pairs,
    digits_flat01,
    digits_images,
    gaussian_loss,
    gaussian_rows,
    healthy,
    hf_ce,
    image_items,
    inverse_sine,
    keyword_text,
    linear_warmup_cosine,
    linear_warmup_decay,
    mdn_loss,
    mdn_rows,
    multitask_accuracy,
    multitask_data,
    multitask_loss,
    multitask_rows,
    ordinal_table,
    pinball_loss,
    pinball_rows,
    poisson_loss,
    poisson_rows,
    progressions,
    r2,
    seed,
    skewed_regression,
    soft_accuracy,
    soft_ce_rows,
    tag_accuracy,
    tag_items,
    tag_loss,
    tag_rows,
    tagging,
    text_items,
    tiny_bert_classifier,
    tiny_bert_tagger,
    tiny_roberta,
    tiny_vit,
    vae_loss,
    vae_rows,
)

CASES = []
H = CASES


def reg_rows(out, y):
    return F.mse_loss(out.reshape(y.shape), y, reduction="none")


def huber_rows(out, y):
    return F.huber_loss(out.reshape(y.shape), y, reduction="none")


def huber_loss(out, y):
    return huber_rows(out, y).mean()


def _first_n(data, n):
    return data[0][:n], data[1][:n]


# ---------------------------------------------------------------- images: digits 8x8

@healthy(H, "gn_cnn_adamw_warmup_cosine_per_batch", "GroupNorm CNN, AdamW wd 0.05, linear warm-up from 0 over 30 "
         "batches then cosine, stepped every batch", 240)
def _():
    seed(0)
    model = GNCNN()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": linear_warmup_cosine(opt, 30, 240), "_loop": {"batch": 32}}


@healthy(H, "convnext_layernorm_channels_last_adamw", "a tiny ConvNeXt: depthwise conv, permute to channels-last, "
         "LayerNorm, inverted MLP with GELU, layer scale 0.1; AdamW 2e-3 wd 0.05", 240)
def _():
    seed(1)
    model = TinyConvNeXt()
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05), "_loop": {"batch": 32}}


def _mix(step, batch, g, cut=False):
    x, y = batch
    lam = float(np.random.default_rng(step).beta(0.4, 0.4))
    perm = torch.randperm(len(x), generator=g)
    onehot = F.one_hot(y, 10).float()
    if cut:
        side = int(round(8 * math.sqrt(1 - lam)))
        r, c = np.random.default_rng(1000 + step).integers(0, 8 - side + 1, 2)
        x = x.clone()
        x[:, :, r:r + side, c:c + side] = x[perm][:, :, r:r + side, c:c + side]
        lam = 1 - side * side / 64
    else:
        x = lam * x + (1 - lam) * x[perm]
    return x, lam * onehot + (1 - lam) * onehot[perm]


@healthy(H, "gn_cnn_mixup_soft_targets", "mixup (alpha 0.4) on the digits: mixed images, soft targets, cross-entropy "
         "against the mixed one-hot rows; Adam 2e-3", 240)
def _():
    seed(2)
    model = GNCNN()
    g = torch.Generator().manual_seed(2)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "batch_fn": lambda s, b: _mix(s, b, g), "loss": soft_ce_rows,
                      "metric": soft_accuracy}}


@healthy(H, "gn_cnn_cutmix_soft_targets", "cutmix: a square of another image pasted in, targets mixed by the pasted "
         "area; Adam 2e-3", 240)
def _():
    seed(3)
    model = GNCNN()
    g = torch.Generator().manual_seed(3)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "batch_fn": lambda s, b: _mix(s, b, g, cut=True), "loss": soft_ce_rows,
                      "metric": soft_accuracy}}


T = 4.0


def _teacher_targets(X, y):
    """Offline distillation: a wider MLP teacher trained on the digits, its temperature-4 probabilities stored."""
    torch.manual_seed(100)
    teacher = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(teacher.parameters(), lr=1e-2)
    flat = X.reshape(len(X), -1)
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(teacher(flat), y).backward()
        opt.step()
    with torch.no_grad():
        return F.softmax(teacher(flat) / T, 1)


def kd_rows(student_logits, soft):
    return (soft * (torch.log(soft.clamp(min=1e-12)) - F.log_softmax(student_logits / T, 1))).sum(1) * T * T


def kd_loss(student_logits, soft):
    return kd_rows(student_logits, soft).mean()


@healthy(H, "gn_cnn_distillation_kl_temperature_4", "offline knowledge distillation: a teacher's temperature-4 "
         "probabilities stored as targets, KL(teacher || student/T) * T^2; Adam 2e-3", 200)
def _():
    seed(4)
    X, y = digits_images()
    model = GNCNN()
    return {"model": model, "data": (X, _teacher_targets(X, y)), "loss_fn": kd_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": kd_rows, "metric": soft_accuracy}}


def focal_rows(out, y, gamma=2.0):
    logp = F.log_softmax(out, 1).gather(1, y[:, None]).squeeze(1)
    return -((1 - logp.exp()) ** gamma) * logp


def focal_loss(out, y):
    return focal_rows(out, y).mean()


@healthy(H, "gn_cnn_focal_loss_gamma_2", "focal loss (gamma 2) written by hand from log_softmax; Adam 2e-3", 240)
def _():
    seed(5)
    model = GNCNN()
    return {"model": model, "data": digits_images(), "loss_fn": focal_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3), "_loop": {"batch": 32, "loss": focal_rows}}


@healthy(H, "gn_resnet_onecycle_sgd_per_batch", "GroupNorm ResNet, SGD momentum 0.9 wd 5e-4 with OneCycleLR "
         "(max 0.1) stepped every batch", 240)
def _():
    seed(6)
    model = GNResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=240),
            "_loop": {"batch": 32}}


@healthy(H, "gn_resnet_zero_init_residual_gn_gamma", "GroupNorm ResNet whose last GroupNorm in each block starts at "
         "zero (blocks start as identities); Adam 1e-3", 240)
def _():
    seed(7)
    model = GNResNet(zero_init=True)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"batch": 32}}


@healthy(H, "gn_resnet_gradient_checkpointing", "torch.utils.checkpoint around each residual block in training "
         "(use_reentrant=False); Adam 1e-3", 200)
def _():
    seed(8)
    model = GNResNet(checkpointing=True)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"batch": 32}}


@healthy(H, "gn_cnn_ema_of_weights_eval_every_50", "an EMA copy of the weights (decay 0.99) updated after every "
         "step, evaluated in eval mode every 50 steps; the EMA model is not in the optimizer", 240)
def _():
    seed(9)
    model = GNCNN()
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    X, y = digits_images()

    def before(step):
        if step > 0:
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters()):
                    pe.mul_(0.99).add_(pm.detach(), alpha=0.01)
        if step % 50 == 0:
            with torch.no_grad():
                ema(X[-200:]).argmax(1)
    return {"model": model, "data": (X[:-200], y[:-200]), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3), "_loop": {"batch": 32, "before": before}}


@healthy(H, "gn_cnn_label_smoothing_0.1_sgd_nesterov", "CrossEntropyLoss(label_smoothing=0.1), SGD nesterov "
         "momentum 0.9 lr 0.05", 240)
def _():
    seed(10)
    model = GNCNN()
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(label_smoothing=0.1),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True),
            "_loop": {"batch": 32, "loss": lambda o, y: F.cross_entropy(o, y, label_smoothing=0.1, reduction="none")}}


def _pretrained_backbone(seed_=11):
    """A GroupNorm CNN trained on digits 0-4 only (a stand-in for a pretrained backbone)."""
    torch.manual_seed(seed_)
    X, y = digits_images()
    keep = y < 5
    net = GNCNN(classes=5)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for i in range(60):
        idx = torch.arange(i * 32, i * 32 + 64) % int(keep.sum())
        opt.zero_grad()
        F.cross_entropy(net(X[keep][idx]), y[keep][idx]).backward()
        opt.step()
    return net


@healthy(H, "gn_cnn_frozen_backbone_new_head_on_purpose", "a backbone trained on digits 0-4 frozen on purpose "
         "(requires_grad False), a new 10-class head, the optimizer over the head only", 200)
def _():
    model = _pretrained_backbone()
    for p in model.parameters():
        p.requires_grad_(False)
    torch.manual_seed(12)
    model.head = nn.Linear(32, 10)
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.head.parameters(), lr=1e-2), "_loop": {"batch": 32}}


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update B @ A (B starts at zero: the layer starts unchanged)."""

    def __init__(self, base, rank=4, alpha=8.0):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + (x @ self.A.T @ self.B.T) * self.scale


@healthy(H, "mlp_lora_adapters_base_frozen", "LoRA-style adapters (rank 4, B zero-initialised) on the hidden layers "
         "of an MLP pretrained on digits 0-4, base weights frozen, a new 10-class head; AdamW 5e-3", 240)
def _():
    torch.manual_seed(13)
    X, y = digits_flat01()
    base = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
    opt = torch.optim.Adam(base.parameters(), lr=3e-3)
    keep = y < 5
    for _ in range(80):
        opt.zero_grad()
        F.cross_entropy(base(X[keep]), y[keep]).backward()
        opt.step()
    model = nn.Sequential(LoRALinear(base[0]), nn.ReLU(), LoRALinear(base[2]), nn.ReLU(), nn.Linear(64, 10))
    trainable = [p for p in model.parameters() if p.requires_grad]
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(trainable, lr=5e-3, weight_decay=0.01), "_loop": {"batch": 32}}


@healthy(H, "gn_cnn_dropout_0.5_batches_of_8", "Dropout(0.5) before the head, batches of 8, Adam 2e-3", 300)
def _():
    seed(14)
    model = GNCNN(drop=nn.Dropout(0.5))
    return {"model": model, "data": digits_images(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3), "_loop": {"batch": 8}}


@healthy(H, "gn_cnn_reduce_lr_on_plateau_validation", "ReduceLROnPlateau(factor 0.5, patience 2) stepped with the "
         "validation loss every 25 steps; SGD momentum lr 0.05", 250)
def _():
    seed(15)
    model = GNCNN()
    X, y = digits_images()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=2)

    def before(step):
        if step and step % 25 == 0:
            was = model.training
            model.eval()
            with torch.no_grad():
                plateau.step(float(F.cross_entropy(model(X[-300:]), y[-300:])))
            model.train(was)
    return {"model": model, "data": (X[:-300], y[:-300]), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": plateau, "_loop": {"batch": 32, "before": before, "sched_step": lambda s: False}}


@healthy(H, "vit_tiny_digits_adamw_warmup_cosine", "ViT from a tiny config (patch 2 on 8x8, 2 layers) fed dict items "
         "with pixel_values; AdamW 2e-3 wd 0.05, warm-up from 0 over 20 batches then cosine", 150)
def _():
    seed(16)
    model = tiny_vit()
    ds = image_items()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    return {"model": model, "data": ds, "loss_fn": hf_ce, "optimizer": opt,
            "scheduler": linear_warmup_cosine(opt, 20, 150),
            "_loop": {"stream": dict_batches(ds, 32), "forward": dict_forward}}


@healthy(H, "vit_tiny_label_smoothing_onecycle", "ViT from a tiny config, label smoothing 0.1, AdamW with OneCycleLR "
         "(max 2e-3) per batch", 150)
def _():
    seed(17)
    model = tiny_vit()
    ds = image_items()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": nn.CrossEntropyLoss(label_smoothing=0.1), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=150),
            "_loop": {"stream": dict_batches(ds, 32), "forward": dict_forward,
                      "loss": lambda o, y: F.cross_entropy(o, y, label_smoothing=0.1, reduction="none")}}


# ---------------------------------------------------------------- autoencoders, embeddings, multi-task

@healthy(H, "autoencoder_denoising_mse", "a denoising autoencoder: Gaussian noise (0.2) on the input pixels, MSE "
         "against the clean pixels; Adam 2e-3", 300)
def _():
    seed(18)
    X, _y = digits_flat01()
    noisy = X + 0.2 * torch.randn(X.shape, generator=torch.Generator().manual_seed(18))
    model = AutoEncoder()
    return {"model": model, "data": (noisy, X), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 64, "loss": lambda o, y: reg_rows(o, y).mean(1), "metric": None}}


@healthy(H, "autoencoder_sigmoid_bce_pixels", "an autoencoder with a Sigmoid output and BCELoss against the pixels in "
         "[0, 1] (the input is its own target); Adam 2e-3", 300)
def _():
    seed(19)
    X, _y = digits_flat01()
    model = AutoEncoder(out=nn.Sigmoid())
    return {"model": model, "data": (X, X.clone()), "loss_fn": nn.BCELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 64, "loss": lambda o, y: F.binary_cross_entropy(o, y, reduction="none").mean(1),
                      "metric": None}}


@healthy(H, "vae_bce_kl_reparameterised", "a VAE: reparameterised sample in training, the mean in eval, BCE on logits "
         "plus KL, outputs [recon, mu, logvar] side by side; Adam 1e-3", 300)
def _():
    seed(20)
    X, _y = digits_flat01()
    model = VAE()
    return {"model": model, "data": (X, X.clone()), "loss_fn": vae_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 64, "loss": vae_rows, "metric": None}}


@healthy(H, "siamese_pairs_same_class_bce", "a siamese network on digit pairs: shared embedding, a logit from |e1-e2| "
         "and e1*e2, BCEWithLogits on same/different; Adam 1e-3", 300)
def _():
    seed(21)
    model = Siamese()
    return {"model": model, "data": digit_pairs(), "loss_fn": nn.BCEWithLogitsLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": lambda o, y: F.binary_cross_entropy_with_logits(o, y, reduction="none"),
                      "metric": lambda o, y: float(((o > 0).float() == y).float().mean())}}


@healthy(H, "siamese_contrastive_margin_loss", "the contrastive loss of Hadsell et al. (margin 1) on the distance of "
         "two shared embeddings; Adam 1e-3", 300)
def _():
    seed(22)
    model = Siamese(mode="distance")
    return {"model": model, "data": digit_pairs(seed_=1), "loss_fn": contrastive_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": contrastive_rows, "metric": None}}


@healthy(H, "embedder_batch_hard_triplet", "unit-length embeddings trained with the batch-hard triplet loss (margin "
         "0.2) on batches of 64 digits; Adam 1e-3", 300)
def _():
    seed(23)
    model = Embedder()
    return {"model": model, "data": digits_flat01(), "loss_fn": batch_hard_triplet_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 64, "loss": batch_hard_triplet_rows, "metric": None}}


@healthy(H, "multitask_class_and_ink_regression", "one trunk, a 10-class head and a regression head (standardised "
         "ink) side by side; CE + 0.5 MSE; targets [class, ink]; Adam 1e-3", 300)
def _():
    seed(24)
    model = MultiTask()
    return {"model": model, "data": multitask_data(), "loss_fn": multitask_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": multitask_rows, "metric": multitask_accuracy}}


# ---------------------------------------------------------------- tables

@healthy(H, "tab_embed_categoricals_adamw_wd_0.05", "numeric features plus two categorical columns through "
         "embeddings; AdamW 2e-3 wd 0.05", 300)
def _():
    seed(25)
    model = TabEmbed()
    return {"model": model, "data": categorical_table(),
            "loss_fn": nn.CrossEntropyLoss(), "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3,
                                                                             weight_decay=0.05),
            "_loop": {"batch": 32}}


def _class_weights(y, k):
    counts = torch.bincount(y, minlength=k).float()
    return counts.sum() / (k * counts)


@healthy(H, "tab_embed_class_weights_80_15_5", "an 80/15/5 table, CrossEntropyLoss with inverse-frequency class "
         "weights; Adam 2e-3", 300)
def _():
    seed(26)
    X, y = categorical_table(n=1200, weights=[0.8, 0.15, 0.05])
    w = _class_weights(y, 3)
    model = TabEmbed()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(weight=w),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 64, "loss": lambda o, t: F.cross_entropy(o, t, weight=w, reduction="none") / w.mean()}}


@healthy(H, "tab_embed_regression_huber_standardised", "embeddings regression on a standardised target, Huber loss, "
         "Adam 2e-3", 300)
def _():
    seed(27)
    model = TabEmbed(out=1)
    return {"model": model, "data": categorical_table(regression=True), "loss_fn": huber_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": huber_rows, "metric": r2, "metric_name": "r2"}}


@healthy(H, "tab_embed_dropout_0.5_batches_of_4", "Dropout 0.5 in the MLP, batches of 4, Adam 1e-3", 400)
def _():
    seed(28)
    model = TabEmbed(dropout=0.5)
    return {"model": model, "data": categorical_table(), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"batch": 4}}


@healthy(H, "tab_embed_gradient_accumulation_4x16", "gradient accumulation: 4 micro-batches of 16, each loss divided "
         "by 4, one step per 4 backward passes; Adam 2e-3", 320)
def _():
    seed(29)
    model = TabEmbed()
    return {"model": model, "data": categorical_table(),
            "loss_fn": nn.CrossEntropyLoss(), "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 16, "accumulate": 4}}


@healthy(H, "rezero_residual_mlp_zero_head", "residual MLP blocks scaled by parameters that start at 0 (ReZero) and "
         "a zero-initialised head; AdamW 2e-3", 300)
def _():
    seed(30)
    X, y = categorical_table()
    model = ResidualMLP(d_in=6)
    return {"model": model, "data": (X[:, :6].contiguous(), y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01), "_loop": {"batch": 32}}


@healthy(H, "tab_embed_sgd_nesterov_steplr_per_epoch", "SGD nesterov lr 0.05, StepLR(step 5, gamma 0.5) stepped at "
         "each epoch end (28 batches of 32)", 336)
def _():
    seed(31)
    model = TabEmbed()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    return {"model": model, "data": categorical_table(),
            "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.StepLR(opt, 5, 0.5), "_loop": {"batch": 32, "sched_epoch": 28}}


@healthy(H, "poisson_regression_log_link", "Poisson regression: the net outputs a log-rate, F.poisson_nll_loss("
         "log_input=True) on counts (output reshaped to the targets); Adam 2e-3", 300)
def _():
    seed(32)
    model = Net(8, (32, 32))
    return {"model": model, "data": count_table(), "loss_fn": poisson_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": poisson_rows, "metric": None}}


@healthy(H, "poisson_log_exposure_offset", "a Poisson GLM-style offset: log(exposure) added to the log-rate, "
         "exposures 0.25-2 years in the last column; Adam 2e-3", 300)
def _():
    seed(33)
    model = PoissonOffset()
    return {"model": model, "data": count_table(exposure=True), "loss_fn": poisson_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": poisson_rows, "metric": None}}


@healthy(H, "quantile_regression_pinball_3", "three quantiles (0.1, 0.5, 0.9) from one net, the pinball loss "
         "against one target column; Adam 2e-3", 300)
def _():
    seed(34)
    model = Net(10, (64, 64), d_out=3)
    return {"model": model, "data": skewed_regression(), "loss_fn": pinball_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": pinball_rows, "metric": None}}


@healthy(H, "ordinal_cumulative_logits_bce", "ordinal regression on 5 grades as 4 cumulative binary logits (grade > "
         "k), BCE; Adam 2e-3", 300)
def _():
    seed(35)
    model = Net(10, (64,), d_out=4)
    return {"model": model, "data": ordinal_table(), "loss_fn": coral_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"batch": 32, "loss": coral_rows, "metric": coral_accuracy}}


@healthy(H, "mdn_three_gaussians_softplus_sigma", "a mixture density network (3 Gaussians, softplus sigmas, "
         "log_softmax weights, logsumexp) on Bishop's inverse sine; Adam 3e-3", 400)
def _():
    seed(36)
    model = MDN()
    return {"model": model, "data": inverse_sine(), "loss_fn": mdn_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3),
            "_loop": {"batch": 64, "loss": mdn_rows, "metric": None}}


@healthy(H, "heteroscedastic_gaussian_nll", "mean and softplus variance per row, GaussianNLLLoss; Adam 1e-3", 300)
def _():
    seed(37)
    model = Heteroscedastic()
    return {"model": model, "data": skewed_regression(seed_=1), "loss_fn": gaussian_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loop": {"batch": 32, "loss": gaussian_rows, "metric": None}}


@healthy(H, "tab_embed_reduce_lr_on_plateau_adam", "Adam 3e-3 with ReduceLROnPlateau (factor 0.3, patience 1) on "
         "the validation loss every 30 steps", 300)
def _():
    seed(38)
    X, y = categorical_table(n=1100)
    model = TabEmbed()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.3, patience=1)

    def before(step):
        if step and step % 30 == 0:
            model.eval()
            with torch.no_grad():
                plateau.step(float(F.cross_entropy(model(X[900:]), y[900:])))
            model.train()
    return {"model": model, "data": (X[:900], y[:900]), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": plateau, "_loop": {"batch": 32, "before": before, "sched_step": lambda s: False}}


# ---------------------------------------------------------------- sequences

@healthy(H, "te_tagger_ignore_index_pads", "nn.TransformerEncoder token tagger, pad labels -100 ignored by "
         "cross-entropy on (N, C, L); AdamW 2e-3 warm-up from 0 over 20 batches, linear decay", 300)
def _():
    seed(39)
    model = TETagger()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    return {"model": model, "data": tagging(), "loss_fn": tag_loss, "optimizer": opt,
            "scheduler": linear_warmup_decay(opt, 20, 300),
            "_loop": {"batch": 32, "loss": tag_rows, "metric": tag_accuracy}}


@healthy(H, "bilstm_tagger_packed_ignore_index", "BiLSTM tagger over packed sequences, -100 at pads; Adam 3e-3, "
         "clipping at 1.0", 300)
def _():
    seed(40)
    model = BiLSTMTagger()
    return {"model": model, "data": tagging(seed_=1), "loss_fn": tag_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3),
            "_loop": {"batch": 32, "loss": tag_rows, "metric": tag_accuracy, "clip": 1.0}}


@healthy(H, "te_classifier_cls_token_warmup_linear", "a [CLS] vector before the tokens, key padding mask, the [CLS] "
         "output classified; AdamW 1e-3 wd 0.01, warm-up from 0 then linear decay per batch", 300)
def _():
    seed(41)
    ids, _mask, labels = keyword_text()
    model = TEClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": (ids, labels), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": linear_warmup_decay(opt, 30, 300), "_loop": {"batch": 32}}


@healthy(H, "te_classifier_bf16_autocast_cpu", "the forward under torch.autocast('cpu', bfloat16), logits cast back "
         "to float32 for the loss; Adam 1e-3", 300)
def _():
    seed(42)
    ids, _mask, labels = keyword_text(seed_=1)
    model = TEClassifier(autocast=True)
    return {"model": model, "data": (ids, labels), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"batch": 32}}


@healthy(H, "tied_embedding_causal_lm", "a causal transformer LM whose output layer shares the embedding matrix, "
         "next-token targets with -100 where none; AdamW 3e-3", 300)
def _():
    seed(43)
    model = TiedLM()
    return {"model": model, "data": progressions(), "loss_fn": tag_loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01),
            "_loop": {"batch": 32, "loss": tag_rows, "metric": tag_accuracy}}


@healthy(H, "roberta_tiny_cosine_warmup_dict_items", "RoBERTa from a tiny config on dict items (pad 0, positions "
         "after it), AdamW 1e-3 wd 0.01, warm-up from 0 over 15 batches then cosine", 150)
def _():
    seed(44)
    model = tiny_roberta()
    ds = text_items()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": hf_ce, "optimizer": opt,
            "scheduler": linear_warmup_cosine(opt, 15, 150),
            "_loop": {"stream": dict_batches(ds, 16), "forward": dict_forward}}


@healthy(H, "bert_token_classification_ignore_index", "BertForTokenClassification from a tiny config, labels -100 "
         "on pads, dict items; AdamW 2e-3", 150)
def _():
    seed(45)
    model = tiny_bert_tagger()
    ds = tag_items()
    return {"model": model, "data": ds, "loss_fn": tag_loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01),
            "_loop": {"stream": dict_batches(ds, 32), "forward": dict_forward, "loss": tag_rows,
                      "metric": tag_accuracy}}


@healthy(H, "bert_layerwise_lr_decay_param_groups", "a tiny BERT with layer-wise learning rates (embeddings 2e-4, "
         "layer 0 4e-4, layer 1 8e-4, pooler and classifier 2e-3), AdamW wd 0.01", 150)
def _():
    seed(46)
    model = tiny_bert_classifier()
    ds = text_items(seed_=1)
    groups = [{"params": model.bert.embeddings.parameters(), "lr": 2e-4},
              {"params": model.bert.encoder.layer[0].parameters(), "lr": 4e-4},
              {"params": model.bert.encoder.layer[1].parameters(), "lr": 8e-4},
              {"params": list(model.bert.pooler.parameters()) + list(model.classifier.parameters()), "lr": 2e-3}]
    return {"model": model, "data": ds, "loss_fn": hf_ce,
            "optimizer": torch.optim.AdamW(groups, lr=1e-3, weight_decay=0.01),
            "_loop": {"stream": dict_batches(ds, 16), "forward": dict_forward}}
