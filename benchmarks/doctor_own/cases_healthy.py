"""Healthy recipes on families the held-out sets lack: a checkup and a watched run of each should stay silent."""

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_own import (  # noqa: E402
    AutoEncoder,
    DictDataset,
    F,
    MultiTask,
    NormCNN,
    Siamese,
    TabEmbed,
    Tagger,
    batches,
    counts,
    dict_batches,
    digits_images,
    healthy,
    hf_forward,
    keyword_text,
    logits_of,
    math,
    mlp,
    multitask_data,
    multitask_loss,
    nn,
    ordinal,
    pixel_forward,
    r2,
    regression,
    seed,
    tabular_categorical,
    tagging,
    tiny_roberta,
    tiny_vit,
    torch,
)

CASES = []


def ce(out, y):
    return F.cross_entropy(logits_of(out), y, reduction="none")


def soft_ce(out, y):
    """Cross-entropy against probability targets (mixup / cutmix / distillation's soft labels)."""
    return -(y * F.log_softmax(out, 1)).sum(1)


def digits_flat():
    X, y = digits_images()
    return X.flatten(1), y


@healthy(CASES, "gn_cnn_digits_adamw_wd005_cosine_warmup", "GroupNorm CNN, AdamW wd 0.05, linear warm-up from 0 then "
         "cosine per batch (LambdaLR)", 150)
def _():
    seed(0)
    X, y = digits_images()
    model = NormCNN(norm="group")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    total, warm = 150, 15
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))))
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt, "scheduler": sched}


@healthy(CASES, "ln_cnn_mixup_soft_targets", "GroupNorm(1) (LayerNorm over C,H,W) CNN with mixup: "
         "soft targets to cross_entropy", 150)
def _():
    seed(1)
    X, y = digits_images()
    model = NormCNN(norm="layer")
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(1)
    stream = batches(X, y, 32)

    def mixed():
        for xb, yb in stream:
            lam = float(torch.distributions.Beta(0.4, 0.4).sample())
            perm = torch.randperm(len(xb), generator=gen)
            soft = F.one_hot(yb, 10).float()
            yield lam * xb + (1 - lam) * xb[perm], lam * soft + (1 - lam) * soft[perm]
    Y = F.one_hot(y, 10).float()
    return {"model": model, "data": (X, Y), "loss_fn": lambda o, t: soft_ce(o, t).mean(), "optimizer": opt,
            "_loop": {"stream": mixed(), "loss": soft_ce, "metric": None}}


@healthy(CASES, "cnn_cutmix_soft_targets_to_F_cross_entropy", "cutmix on digits, soft targets passed to "
         "F.cross_entropy (probabilities are a valid target since torch 1.10)", 150)
def _():
    seed(2)
    X, y = digits_images()
    model = NormCNN(norm="group")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    stream = batches(X, y, 32)

    def cut():
        for xb, yb in stream:
            perm = torch.randperm(len(xb))
            xb = xb.clone()
            xb[:, :, :4, :4] = xb[perm][:, :, :4, :4]
            soft = F.one_hot(yb, 10).float()
            yield xb, 0.75 * soft + 0.25 * soft[perm]
    Y = F.one_hot(y, 10).float()
    return {"model": model, "data": (X, Y), "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": {"stream": cut(), "loss": lambda o, t: F.cross_entropy(o, t, reduction="none"),
                      "metric": None}}


@healthy(CASES, "autoencoder_digits_mse", "an MLP autoencoder on digits, MSE reconstruction (target = input)", 150)
def _():
    seed(3)
    X, _ = digits_images()
    flat = X.flatten(1)
    model = AutoEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (flat, flat), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"loss": lambda o, t: F.mse_loss(o, t, reduction="none").mean(1), "metric": None}}


@healthy(CASES, "tabular_embeddings_dropout05_class_weights", "numeric + categorical embeddings, dropout 0.5, "
         "class weights, batches of 8", 150)
def _():
    seed(4)
    X, y = tabular_categorical()
    model = TabEmbed(dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    w = torch.tensor([1.0, 1.5])
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(weight=w), "optimizer": opt,
            "_loop": {"batch": 8, "loss": lambda o, t: F.cross_entropy(o, t, weight=w, reduction="none")}}


@healthy(CASES, "tagger_transformer_ignore_index_padding", "nn.TransformerEncoder tagger, padding tagged -100 "
         "and ignored by CrossEntropyLoss over (N, C, L)", 150)
def _():
    seed(5)
    ids, tags = tagging()
    model = Tagger()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)

    def loss(out, t):
        per_token = F.cross_entropy(out.transpose(1, 2), t, ignore_index=-100, reduction="none")
        return per_token.sum(1) / (t != -100).sum(1).clamp(min=1)
    return {"model": model, "data": (ids, tags),
            "loss_fn": lambda o, t: F.cross_entropy(o.transpose(1, 2), t, ignore_index=-100), "optimizer": opt,
            "_loop": {"loss": loss, "metric": None}}


@healthy(CASES, "tagger_flattened_logits_ignore_index", "the same tagger's loss written as logits.view(-1, C) "
         "against tags.view(-1) with ignore_index=-100 (the Hugging Face way)", 150)
def _():
    seed(6)
    ids, tags = tagging()
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def loss(out, t):
        flat = F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1), ignore_index=-100, reduction="none")
        return flat.view(t.shape).sum(1) / (t != -100).sum(1).clamp(min=1)
    return {"model": model, "data": (ids, tags),
            "loss_fn": lambda o, t: F.cross_entropy(o.reshape(-1, o.shape[-1]), t.reshape(-1), ignore_index=-100),
            "optimizer": opt, "_loop": {"loss": loss, "metric": None}}


@healthy(CASES, "roberta_warmup_linear_decay_grad_accum", "tiny RoBERTa, AdamW, linear warm-up from 0 and decay "
         "per update, gradient accumulation 2 x 8", 120)
def _():
    seed(7)
    ids, mask, labels = keyword_text(seed_=7)
    ds = DictDataset(ids, mask, labels)
    model = tiny_roberta()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(s / 6, max(0.0, (60 - s) / 54)))
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt, "scheduler": sched,
            "_loop": {"stream": dict_batches(ds, 8), "forward": hf_forward, "accumulate": 2}}


@healthy(CASES, "vit_digits_label_smoothing_onecycle", "tiny ViT on 8x8 digits, label smoothing 0.1, OneCycle per "
         "batch", 150)
def _():
    seed(8)
    X, y = digits_images()
    model = tiny_vit()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=150)
    return {"model": model, "data": (X, y), "optimizer": opt,
            "loss_fn": lambda o, t: F.cross_entropy(logits_of(o), t, label_smoothing=0.1),
            "scheduler": sched,
            "_loop": {"forward": pixel_forward,
                      "loss": lambda o, t: F.cross_entropy(o, t, label_smoothing=0.1, reduction="none")}}


@healthy(CASES, "siamese_contrastive_pairs", "a siamese encoder on digit pairs, contrastive loss (margin 1) on the "
         "pair distance; target 1 = same digit", 150)
def _():
    seed(9)
    X, y = digits_flat()
    g = torch.Generator().manual_seed(9)
    a, b = torch.randint(0, len(X), (1200,), generator=g), torch.randint(0, len(X), (1200,), generator=g)
    same = (torch.rand(1200, generator=g) < 0.5)
    for i in torch.nonzero(same).flatten().tolist():  # half the pairs share a digit
        b[i] = torch.nonzero(y == y[a[i]]).flatten()[i % int((y == y[a[i]]).sum())]
    pairs, target = torch.stack([X[a], X[b]], 1), (y[a] == y[b]).float()
    model = Siamese()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def contrastive(d, t):
        return t * d.pow(2) + (1 - t) * F.relu(1.0 - d).pow(2)
    return {"model": model, "data": (pairs, target), "loss_fn": lambda d, t: contrastive(d, t).mean(),
            "optimizer": opt, "_loop": {"loss": contrastive, "metric": None}}


@healthy(CASES, "triplet_margin_embedding", "an embedding net trained with TripletMarginLoss on (anchor, positive, "
         "negative) digit triplets; the target column is unused zeros", 150)
def _():
    seed(10)
    X, y = digits_flat()
    g = torch.Generator().manual_seed(10)
    anchors = torch.randint(0, len(X), (1000,), generator=g)
    pos = torch.stack([torch.nonzero(y == y[i]).flatten()[int(j)] for i, j in
                       zip(anchors, torch.randint(0, 150, (1000,), generator=g) % 170)])
    neg = torch.stack([torch.nonzero(y != y[i]).flatten()[int(j)] for i, j in
                       zip(anchors, torch.randint(0, 1500, (1000,), generator=g))])
    trip = torch.stack([X[anchors], X[pos], X[neg]], 1)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, t):
            return torch.stack([self.net(t[:, k]) for k in range(3)], 1)
    tower = Tower()
    opt = torch.optim.Adam(tower.parameters(), lr=1e-3)

    def triplet(out, _):
        return F.triplet_margin_loss(out[:, 0], out[:, 1], out[:, 2], margin=1.0, reduction="none")
    return {"model": tower, "data": (trip, torch.zeros(len(trip))), "loss_fn": lambda o, t: triplet(o, t).mean(),
            "optimizer": opt, "_loop": {"loss": triplet, "metric": None}}


@healthy(CASES, "multitask_cls_plus_regression", "a shared trunk with a class head and a regression head; one "
         "(N, 2) target, column 0 the class", 150)
def _():
    seed(11)
    X, T = multitask_data()
    model = MultiTask(X.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (X, T), "loss_fn": multitask_loss, "optimizer": opt,
            "_loop": {"loss": lambda o, t: multitask_loss(o, t, "none"), "metric": None}}


@healthy(CASES, "poisson_regression_counts", "Poisson regression on counts: PoissonNLLLoss(log_input=True)", 150)
def _():
    seed(12)
    X, c = counts()
    model = mlp(X.shape[1], 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (X, c.unsqueeze(1)), "loss_fn": nn.PoissonNLLLoss(log_input=True),
            "optimizer": opt,
            "_loop": {"loss": lambda o, t: F.poisson_nll_loss(o, t, reduction="none").squeeze(1), "metric": None}}


@healthy(CASES, "quantile_regression_three_quantiles", "pinball loss for the 10th, 50th and 90th percentiles",
         150)
def _():
    seed(13)
    X, y = regression(seed_=13)
    q = torch.tensor([0.1, 0.5, 0.9])
    model = mlp(X.shape[1], 3)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def pinball(out, t):
        e = t.reshape(-1, 1) - out
        return torch.maximum(q * e, (q - 1) * e).mean(1)
    return {"model": model, "data": (X, y), "loss_fn": lambda o, t: pinball(o, t).mean(), "optimizer": opt,
            "_loop": {"loss": pinball, "metric": None}}


@healthy(CASES, "ordinal_coral_cumulative_bce", "ordinal regression, CORAL-style: K-1 cumulative logits with "
         "BCE-with-logits against (grade > k) targets", 150)
def _():
    seed(14)
    X, g = ordinal()
    levels = 5
    cum = (g.unsqueeze(1) > torch.arange(levels - 1)).float()
    model = mlp(X.shape[1], levels - 1)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (X, cum), "loss_fn": nn.BCEWithLogitsLoss(), "optimizer": opt,
            "_loop": {"loss": lambda o, t: F.binary_cross_entropy_with_logits(o, t, reduction="none").mean(1),
                      "metric": None}}


@healthy(CASES, "distillation_kl_temperature_4", "a student distilled from a fixed teacher's soft labels: "
         "KL(student / T, teacher / T) * T^2 with T = 4", 150)
def _():
    seed(15)
    X, y = digits_flat()
    teacher = mlp(64, 10, hidden=128)
    topt = torch.optim.Adam(teacher.parameters(), lr=3e-3)
    for _ in range(150):
        idx = torch.randint(0, len(X), (64,))
        topt.zero_grad()
        F.cross_entropy(teacher(X[idx]), y[idx]).backward()
        topt.step()
    T = 4.0
    with torch.no_grad():
        soft = F.softmax(teacher(X) / T, 1)
    student = mlp(64, 10, hidden=32)
    opt = torch.optim.Adam(student.parameters(), lr=2e-3)

    def kd(out, t):
        return F.kl_div(F.log_softmax(out / T, 1), t, reduction="none").sum(1) * T * T
    return {"model": student, "data": (X, soft), "loss_fn": lambda o, t: kd(o, t).mean(), "optimizer": opt,
            "_loop": {"loss": kd, "metric": None}}


@healthy(CASES, "focal_loss_imbalanced_tabular", "focal loss (gamma 2) on 85/15 categorical-tabular data", 150)
def _():
    seed(16)
    X, y = tabular_categorical(seed_=16)
    keep = torch.nonzero((y == 0) | (torch.rand(len(y)) < 0.18)).flatten()
    X, y = X[keep], y[keep]
    model = TabEmbed()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def focal(out, t):
        logp = F.log_softmax(out, 1).gather(1, t[:, None]).squeeze(1)
        return -((1 - logp.exp()) ** 2) * logp
    return {"model": model, "data": (X, y), "loss_fn": lambda o, t: focal(o, t).mean(), "optimizer": opt,
            "_loop": {"loss": focal}}


@healthy(CASES, "frozen_backbone_lora_adapter", "a frozen MLP backbone with a trainable low-rank adapter (B "
         "zero-initialised) and a zero-initialised head", 150)
def _():
    seed(17)
    X, y = digits_flat()

    class LoRA(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(64, 64)
            self.a = nn.Parameter(torch.randn(64, 4) * 0.1)
            self.b = nn.Parameter(torch.zeros(4, 64))
            self.head = nn.Linear(64, 10)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
            self.base.requires_grad_(False)

        def forward(self, x):
            return self.head(F.relu(self.base(x) + x @ self.a @ self.b))
    model = LoRA()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


@healthy(CASES, "gradient_checkpointing_weight_tying", "an autoencoder whose decoder reuses the encoder's weight "
         "(tied, transposed) with torch.utils.checkpoint around the encoder", 150)
def _():
    seed(18)
    X, _ = digits_images()
    flat = X.flatten(1)

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(64, 16)
            self.dec_bias = nn.Parameter(torch.zeros(64))

        def forward(self, x):
            from torch.utils.checkpoint import checkpoint
            h = checkpoint(lambda v: torch.relu(self.enc(v)), x, use_reentrant=False)
            return torch.sigmoid(h @ self.enc.weight + self.dec_bias)
    model = Tied()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (flat, flat), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"loss": lambda o, t: F.mse_loss(o, t, reduction="none").mean(1), "metric": None}}


@healthy(CASES, "bf16_autocast_cpu_ema_weights", "bf16 autocast on the CPU for the forward, an EMA copy of the "
         "weights updated after each step", 150)
def _():
    seed(19)
    X, y = digits_flat()
    net = mlp(64, 10)

    class Autocast(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.net(x).float()
    model = Autocast()
    ema = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def update_ema(step):
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.99).add_(p, alpha=0.01)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"before": update_ema}}


@healthy(CASES, "reduce_on_plateau_sgd_nesterov_batch4", "SGD nesterov, batches of 4, ReduceLROnPlateau stepped on "
         "the running loss every 25 steps", 160)
def _():
    seed(20)
    X, y = tabular_categorical(seed_=20)
    model = TabEmbed()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)

    def watch_plateau(step):
        if step and step % 25 == 0:
            plateau.step(1.0 / step)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch": 4, "before": watch_plateau}}


@healthy(CASES, "zero_init_residual_scale_mlp", "a residual MLP whose branches are scaled by learnable scalars "
         "initialised to 0 (ReZero)", 150)
def _():
    seed(21)
    X, y = regression(seed_=21)

    class ReZero(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(X.shape[1], 32)
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32))
                                        for _ in range(3))
            self.alpha = nn.Parameter(torch.zeros(3))
            self.out = nn.Linear(32, 1)

        def forward(self, x):
            h = self.inp(x)
            for a, block in zip(self.alpha, self.blocks):
                h = h + a * block(h)
            return self.out(h).squeeze(1)
    model = ReZero()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (X, y), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"loss": lambda o, t: F.mse_loss(o, t, reduction="none"), "metric": r2, "metric_name": "r2"}}
