"""Healthy recipes people use: a checkup and a watched run of each should stay silent."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_v2 import (  # noqa: E402
    AttnPoolGRU,
    BagOfEmbeddings,
    BiLSTMMean,
    DictDataset,
    F,
    Net,
    PositionalText,
    SignalCNN,
    SignalResNet,
    WideDeep,
    bce_rows,
    circles,
    classification,
    dict_batches,
    healthy,
    hf_forward,
    keyword_text,
    logits_of,
    math,
    moons,
    mse_rows,
    multilabel,
    multilabel_f1,
    nn,
    np,
    r2,
    regression,
    seed,
    signal_amplitudes,
    signals,
    standardise,
    tabular,
    text_dataset,
    tiny_bert,
    tiny_distilbert,
    tiny_gpt2,
    torch,
)

CASES = []


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def hf(ds, batch=16, **extra):
    return {"stream": dict_batches(ds, batch), "forward": hf_forward, **extra}


def smoothed(eps):
    def loss(out, y):
        return F.cross_entropy(logits_of(out), y, reduction="none", label_smoothing=eps)
    return loss


def weighted(w):
    def loss(out, y):
        return F.cross_entropy(logits_of(out), y, weight=w, reduction="none")
    return loss


def imbalanced_text(n=320, seed_=0, shares=(0.7, 0.1, 0.1, 0.1)):
    """Keyword texts whose classes are drawn 70/10/10/10."""
    ids, mask, y = keyword_text(n=3 * n, seed_=seed_)
    rng = np.random.default_rng(seed_)
    keep = []
    for c, share in enumerate(shares):
        idx = np.flatnonzero(y.numpy() == c)
        keep += list(rng.choice(idx, int(share * n), replace=False))
    keep = torch.tensor(rng.permutation(keep))
    return ids[keep], mask[keep], y[keep]


# ---------------------------------------------------------------- transformers from small configs

@healthy(CASES, "bert_linear_warmup_from_zero_adamw", "BERT fine-tune: AdamW wd 0.01, linear warm-up from 0 over 20 "
         "steps then linear decay (transformers' schedule)", 150)
def _():
    from transformers import get_linear_schedule_with_warmup
    seed(100)
    model, ds = tiny_bert(classes=4, vocab=80), text_dataset(seed_=100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "scheduler": get_linear_schedule_with_warmup(opt, 20, 150), "_loop": hf(ds)}


@healthy(CASES, "distilbert_cosine_warmup_wd_0.05", "DistilBERT: AdamW wd 0.05, cosine schedule with 15 warm-up steps",
         150)
def _():
    from transformers import get_cosine_schedule_with_warmup
    seed(101)
    model, ds = tiny_distilbert(), text_dataset(seed_=101)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "scheduler": get_cosine_schedule_with_warmup(opt, 15, 150), "_loop": hf(ds)}


@healthy(CASES, "gpt2_scaled_init_betas_095_wd_0.1", "GPT-2 classifier (its own scaled init of c_proj), AdamW betas "
         "(0.9, 0.95), wd 0.1, warm-up from 0", 150)
def _():
    seed(102)
    model, ds = tiny_gpt2(classes=4, vocab=80), text_dataset(seed_=102)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 20))
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt, "scheduler": sched,
            "_loop": hf(ds)}


@healthy(CASES, "bert_label_smoothing_0.1", "BERT fine-tune with cross-entropy label_smoothing=0.1", 140)
def _():
    seed(103)
    model, ds = tiny_bert(classes=4, vocab=80), text_dataset(seed_=103)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": nn.CrossEntropyLoss(label_smoothing=0.1), "optimizer": opt,
            "_loop": hf(ds, loss=smoothed(0.1))}


@healthy(CASES, "distilbert_embeddings_frozen_on_purpose", "DistilBERT with its embeddings frozen (requires_grad "
         "False, left out of the optimizer): only the transformer and head train", 140)
def _():
    seed(104)
    model, ds = tiny_distilbert(), text_dataset(seed_=104)
    model.distilbert.embeddings.requires_grad_(False)
    opt = torch.optim.AdamW(trainable(model), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt, "_loop": hf(ds)}


@healthy(CASES, "gpt2_gradient_accumulation_4x8", "GPT-2: micro-batches of 8, four accumulated per AdamW step", 160)
def _():
    seed(105)
    model, ds = tiny_gpt2(classes=4, vocab=80), text_dataset(seed_=105)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": hf(ds, batch=8, accumulate=4)}


@healthy(CASES, "bert_class_weights_70_10_10_10", "BERT on 70/10/10/10 classes with inverse-frequency class weights",
         140)
def _():
    seed(106)
    ids, mask, y = imbalanced_text(seed_=106)
    ds = DictDataset(ids, mask, y)
    w = torch.tensor(1.0 / np.bincount(y.numpy(), minlength=4), dtype=torch.float32)
    w = w / w.mean()
    model = tiny_bert(classes=4, vocab=80)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": nn.CrossEntropyLoss(weight=w), "optimizer": opt,
            "_loop": hf(ds, loss=weighted(w))}


@healthy(CASES, "distilbert_batches_of_8_clip_1", "DistilBERT, batches of 8, gradient clipping at 1.0 (a standard "
         "fine-tune setting)", 150)
def _():
    seed(107)
    model, ds = tiny_distilbert(), text_dataset(seed_=107)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": hf(ds, batch=8, clip=1.0)}


# ---------------------------------------------------------------- tables

@healthy(CASES, "digits_mlp_label_smoothing_0.2_adamw", "digits MLP, AdamW wd 0.02, label smoothing 0.2", 160)
def _():
    seed(110)
    X, y = tabular("digits")
    model = Net(64, (128, 64), 10)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(label_smoothing=0.2),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.02),
            "_loop": {"loss": smoothed(0.2), "batch": 64}}


@healthy(CASES, "binary_92_8_bce_pos_weight", "a 92/8 binary table, one logit, BCEWithLogits with pos_weight=11.5",
         160)
def _():
    seed(111)
    X, y = classification(n=800, classes=2, weights=[0.92, 0.08])
    yf = y.float()[:, None]
    pw = torch.tensor([11.5])
    model = Net(16, (32, 32), 1)

    def loss(out, t):
        return F.binary_cross_entropy_with_logits(out, t, pos_weight=pw, reduction="none").squeeze(1)

    def acc(out, t):
        return float(((out > 0).float() == t).float().mean())
    return {"model": model, "data": (X, yf), "loss_fn": nn.BCEWithLogitsLoss(pos_weight=pw),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"loss": loss, "metric": acc}}


@healthy(CASES, "three_class_80_15_5_class_weights", "an 80/15/5 table with class-weighted cross-entropy", 160)
def _():
    seed(112)
    X, y = classification(n=900, weights=[0.8, 0.15, 0.05])
    w = torch.tensor(len(y) / (3.0 * np.bincount(y.numpy(), minlength=3)), dtype=torch.float32)
    model = Net(16, (64, 32), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(weight=w),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"loss": weighted(w)}}


@healthy(CASES, "wine_zero_initialised_head", "wine MLP whose output layer starts at zero (weights and bias)", 150)
def _():
    seed(113)
    X, y = tabular("wine")
    model = Net(13, (32,), 3)
    nn.init.zeros_(model.head.weight)
    nn.init.zeros_(model.head.bias)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3), "_loop": {"batch": 16}}


@healthy(CASES, "moons_tanh_sgd_momentum", "two moons, tanh MLP, SGD momentum 0.9 lr 0.05", 200)
def _():
    seed(114)
    X, y = moons()
    model = Net(2, (32, 32), 2, act=nn.Tanh)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)}


@healthy(CASES, "circles_silu_rmsprop", "concentric circles, SiLU MLP, RMSprop lr 1e-3", 200)
def _():
    seed(115)
    X, y = circles()
    model = Net(2, (64, 64), 2, act=nn.SiLU)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.RMSprop(model.parameters(), lr=1e-3)}


@healthy(CASES, "layernorm_gelu_mlp_warmup_from_zero", "LayerNorm + GELU MLP, AdamW wd 0.05, linear warm-up from lr 0",
         160)
def _():
    seed(116)
    X, y = classification(n=800, features=20, classes=4)
    model = Net(20, (64, 64), 4, act=nn.GELU, norm="layer")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 30))}


@healthy(CASES, "dropout_0.5_mlp_adam", "an MLP with Dropout(0.5) after each hidden layer (noisy training loss)", 180)
def _():
    seed(117)
    X, y = classification(n=800, features=20, classes=3)
    model = Net(20, (128, 128), 3, dropout=0.5)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@healthy(CASES, "multilabel_bce_adam", "multi-label tagging: 5 sigmoid outputs, BCEWithLogits, multi-hot targets", 180)
def _():
    seed(118)
    X, Y = multilabel()
    model = Net(20, (64,), 5)
    return {"model": model, "data": (X, Y), "loss_fn": nn.BCEWithLogitsLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"loss": bce_rows, "metric": multilabel_f1, "metric_name": "f1"}}


@healthy(CASES, "multilabel_bce_pos_weight_per_label", "multi-label with a pos_weight per label (negatives / "
         "positives)", 180)
def _():
    seed(119)
    X, Y = multilabel(labels=6, seed_=119)
    pw = ((len(Y) - Y.sum(0)) / Y.sum(0).clamp(min=1))
    model = Net(20, (64,), 6)

    def loss(out, t):
        return F.binary_cross_entropy_with_logits(out, t, pos_weight=pw, reduction="none").mean(1)
    return {"model": model, "data": (X, Y), "loss_fn": nn.BCEWithLogitsLoss(pos_weight=pw),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"loss": loss, "metric": multilabel_f1, "metric_name": "f1"}}


@healthy(CASES, "regression_standardised_adamw_wd_0.01", "make_regression, standardised X and y, AdamW wd 0.01, MSE",
         180)
def _():
    seed(120)
    X, y = regression()
    model = Net(10, (64, 64), 1)
    return {"model": model, "data": (X, y[:, None]), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01),
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2"}}


@healthy(CASES, "diabetes_standardised_huber", "diabetes with standardised target, Huber loss, Adam", 180)
def _():
    seed(121)
    X, y = tabular("diabetes")
    y = (y - y.mean()) / y.std()
    model = Net(10, (32, 32), 1)

    def loss(out, t):
        return F.smooth_l1_loss(out, t, reduction="none").squeeze(1)
    return {"model": model, "data": (X, y[:, None]), "loss_fn": nn.SmoothL1Loss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"loss": loss, "metric": r2, "metric_name": "r2"}}


@healthy(CASES, "three_target_regression_standardised", "three standardised targets, a 3-output head, MSE", 180)
def _():
    seed(122)
    X, Y = regression(targets=3, seed_=122)
    model = Net(10, (64, 64), 3)
    return {"model": model, "data": (X, Y), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3),
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2"}}


@healthy(CASES, "wide_and_deep_with_category_embedding", "wide & deep: numeric features plus a 10-id categorical "
         "column through an embedding", 160)
def _():
    seed(123)
    X, y = classification(n=600, features=6, classes=2, seed_=123)
    cat = (X[:, 0] > 0).long() * 5 + torch.randint(0, 5, (600,))
    model = WideDeep(6, 10)
    return {"model": model, "data": (torch.cat([X, cat[:, None].float()], 1), y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3)}


@healthy(CASES, "wine_batches_of_4_adam", "wine with batches of 4 (very noisy loss), Adam lr 1e-3", 200)
def _():
    seed(124)
    X, y = tabular("wine")
    model = Net(13, (32,), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"batch": 4}}


def mixed_batches(X, y, sizes=(8, 16, 24, 48, 64), seed_=0):
    """Batches whose size changes every step (variable-length buckets, a last partial batch...)."""
    g = torch.Generator().manual_seed(seed_)
    while True:
        size = sizes[int(torch.randint(0, len(sizes), (1,), generator=g))]
        idx = torch.randint(0, len(X), (size,), generator=g)
        yield X[idx], y[idx]


@healthy(CASES, "mixed_batch_sizes_8_to_64", "batch size varies every step between 8 and 64", 180)
def _():
    seed(125)
    X, y = classification(n=800, seed_=125)
    model = Net(16, (64, 64), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"stream": mixed_batches(X, y)}}


@healthy(CASES, "mlp_cosine_warm_restarts_per_batch", "CosineAnnealingWarmRestarts(T_0=40) stepped per batch "
         "(restarts are part of the recipe)", 200)
def _():
    seed(126)
    X, y = classification(n=800, features=20, classes=4, seed_=126)
    model = Net(20, (64, 64), 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=40)}


@healthy(CASES, "regression_onecycle_per_batch", "OneCycleLR over the run, stepped per batch, on a regression MLP", 180)
def _():
    seed(127)
    X, y = regression(seed_=127)
    model = Net(10, (64, 64), 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": (X, y[:, None]), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=180),
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2"}}


@healthy(CASES, "mlp_gradient_accumulation_4", "micro-batches of 16, four accumulated per Adam step", 200)
def _():
    seed(128)
    X, y = classification(n=800, seed_=128)
    model = Net(16, (64, 64), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=2e-3), "_loop": {"batch": 16, "accumulate": 4}}


@healthy(CASES, "bn_mlp_adamw_wd_0.1", "BatchNorm MLP on breast_cancer, AdamW weight decay 0.1", 160)
def _():
    seed(129)
    X, y = tabular("breast_cancer")
    model = Net(30, (64, 32), 2, norm="batch")
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)}


# ---------------------------------------------------------------- signals and images

@healthy(CASES, "signal_cnn_adam_cosine_per_batch", "Conv1d-BN CNN on waveforms, Adam, cosine over the run per batch",
         180)
def _():
    seed(130)
    X, y = signals(seed_=130)
    model = SignalCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=180)}


@healthy(CASES, "signal_resnet_zero_init_residual_nesterov", "1-d ResNet, each block's last BN gamma zero, SGD "
         "nesterov 0.9 wd 5e-4", 180)
def _():
    seed(131)
    X, y = signals(seed_=131)
    model = SignalResNet(zero_init=True)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                         weight_decay=5e-4)}


@healthy(CASES, "signal_cnn_onecycle_sgd", "OneCycleLR (max_lr 0.1) per batch on the waveform CNN, SGD momentum", 180)
def _():
    seed(132)
    X, y = signals(seed_=132)
    model = SignalCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.004, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=180)}


@healthy(CASES, "signal_resnet_steplr_per_epoch", "1-d ResNet, StepLR(step_size=4 epochs, gamma 0.3) stepped once per "
         "epoch of 20 batches", 200)
def _():
    seed(133)
    X, y = signals(n=640, seed_=133)
    model = SignalResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.3),
            "_loop": {"sched_epoch": 20}}


@healthy(CASES, "signal_amplitude_regression_standardised", "Conv1d regression of a standardised log-amplitude", 180)
def _():
    seed(134)
    X, t = signal_amplitudes(seed_=134)
    model = SignalCNN(out=1)
    return {"model": model, "data": (X, t[:, None]), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3),
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2"}}


def shifted_digits(X, y, batch=64, seed_=0):
    """Digit batches randomly shifted by up to one pixel (augmentation)."""
    g = torch.Generator().manual_seed(seed_)
    while True:
        idx = torch.randint(0, len(X), (batch,), generator=g)
        dx, dy = (int(v) for v in torch.randint(-1, 2, (2,), generator=g))
        yield torch.roll(X[idx], shifts=(dy, dx), dims=(2, 3)), y[idx]


@healthy(CASES, "digits_conv_bn_shift_augmentation", "a Conv2d-BN net on the 8x8 digits with random one-pixel shifts",
         160)
def _():
    seed(135)
    X, y = tabular("digits")
    X = standardise(X).reshape(-1, 1, 8, 8)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3), "_loop": {"stream": shifted_digits(X, y)}}


@healthy(CASES, "signal_frozen_backbone_linear_probe", "a Conv1d backbone frozen on purpose (requires_grad False; "
         "BN statistics still follow the data in train mode); only the head is in the optimizer (a linear probe)", 150)
def _():
    seed(136)
    X, y = signals(seed_=136)
    model = SignalCNN()
    for name, p in model.named_parameters():
        if not name.startswith("head"):
            p.requires_grad_(False)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.head.parameters(), lr=1e-2)}


# ---------------------------------------------------------------- recurrent and small text models

@healthy(CASES, "bilstm_packed_padding_adam", "bidirectional LSTM over packed padded texts, masked mean, Adam", 160)
def _():
    seed(140)
    ids, _, y = keyword_text(seed_=140)
    model = BiLSTMMean()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3)}


@healthy(CASES, "gru_attention_pool_warmup_from_zero", "GRU with masked attention pooling, LambdaLR warm-up from 0 "
         "over 25 steps", 160)
def _():
    seed(141)
    ids, _, y = keyword_text(seed_=141)
    model = AttnPoolGRU()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 25))}


@healthy(CASES, "bag_of_embeddings_adagrad", "fastText-style mean of embeddings, Adagrad lr 0.05", 160)
def _():
    seed(142)
    ids, _, y = keyword_text(seed_=142)
    model = BagOfEmbeddings()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adagrad(model.parameters(), lr=0.05)}


@healthy(CASES, "transformer_noam_warmup_clip_1", "one encoder layer, Adam betas (0.9, 0.98), Noam schedule (warm-up "
         "then 1/sqrt(step)), clipping at 1.0", 160)
def _():
    seed(143)
    ids, _, y = keyword_text(seed_=143)
    model = PositionalText()
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    d, warm = 32, 30
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * d ** -0.5 * min(max(s, 1) ** -0.5, max(s, 1) * warm ** -1.5))
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": sched, "_loop": {"clip": 1.0}}


@healthy(CASES, "gru_pretrained_embeddings_frozen", "GRU whose embedding (pretrained vectors) is frozen on purpose",
         160)
def _():
    seed(144)
    ids, _, y = keyword_text(seed_=144)
    model = AttnPoolGRU()
    model.emb.weight.requires_grad_(False)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(trainable(model), lr=3e-3)}


@healthy(CASES, "bilstm_batches_of_8", "bidirectional LSTM with batches of 8 (noisy), Adam lr 1e-3", 200)
def _():
    seed(145)
    ids, _, y = keyword_text(seed_=145)
    model = BiLSTMMean()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_loop": {"batch": 8}}


@healthy(CASES, "transformer_label_smoothing_cosine_adamw", "one encoder layer, label smoothing 0.1, AdamW wd 0.01, "
         "cosine over the run", 160)
def _():
    seed(146)
    ids, _, y = keyword_text(seed_=146)
    model = PositionalText()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(label_smoothing=0.1), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=160),
            "_loop": {"loss": smoothed(0.1)}}


@healthy(CASES, "signal_cnn_cosine_restarts_epoch_fraction", "CosineAnnealingWarmRestarts stepped with fractional "
         "epochs (scheduler.step(epoch + i / iters)), T_0=3 epochs", 180)
def _():
    seed(147)
    X, y = signals(seed_=147)
    model = SignalCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3)
    counter = {"i": 0}

    def step_fraction(s):
        counter["i"] += 1
        sched.step(counter["i"] / 20)
        return False
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": sched, "_loop": {"sched_step": step_fraction}}


_ = (math,)
