"""Checkup-phase bugs of the third held-out set: each `build()` is a set-up with one bug a practitioner made, visible
before training. Written without reading activis's code."""

import copy
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_v3 import (  # noqa: E402
    GNCNN,
    VAE,
    AutoEncoder,
    BiLSTMTagger,
    Embedder,
    MultiTask,
    Net,
    Siamese,
    TabEmbed,
    TETagger,
    bug,
    categorical_table,
    coral_loss,
    count_table,
    digit_pairs,
    digits_flat01,
    digits_images,
    gaussian_loss,
    hf_ce,
    image_items,
    inverse_sine,
    loader,
    multitask_data,
    multitask_loss,
    ordinal_table,
    poisson_loss,
    seed,
    skewed_regression,
    tag_loss,
    tagging,
    text_items,
    tiny_roberta,
    tiny_vit,
)

CASES = []
B = CASES


def adam(model, lr=1e-3):
    return torch.optim.Adam(model.parameters(), lr=lr)


def setup(model, data, loss_fn, optimizer=None, **extra):
    return {"model": model, "data": data, "loss_fn": loss_fn, "optimizer": optimizer or adam(model), **extra}


# ---------------------------------------------------------------- batch dependence

@bug(B, "gn_cnn_log_softmax_over_batch_dim", "batch_dependence", "out",
     "nn.LogSoftmax(dim=0) after the head (normalises over the batch, not the classes), then NLLLoss")
def _():
    seed(0)
    model = GNCNN(out=nn.LogSoftmax(dim=0))
    return setup(model, digits_images(), nn.NLLLoss())


class SequenceFirstTagger(TETagger):
    def forward(self, ids):
        """The key padding mask was dropped when the shapes stopped matching ((N, L); the layer wanted (L, N))."""
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.encoder(h))


@bug(B, "token_encoder_missing_batch_first", "batch_dependence", "encoder",
     "nn.TransformerEncoderLayer built without batch_first=True and fed (N, L, D): attention runs over the batch",
     where_also=["encoder.layers.0", "encoder.layers.0.self_attn"])
def _():
    seed(1)
    model = SequenceFirstTagger(batch_first=False, dropout=0.0)
    return setup(model, tagging(), tag_loss)


class ToTimeMajor(nn.Module):
    """Meant to turn (N, L, D) into (L, N, D) for a time-major LSTM; `view` reinterprets the memory instead."""

    def forward(self, x):
        n, length, d = x.shape
        return x.view(length, n, d)


class FromTimeMajor(nn.Module):
    def forward(self, x):
        length, n, d = x.shape
        return x.view(n, length, d)


class TimeMajorTagger(nn.Module):
    def __init__(self, vocab=40, dim=32, hidden=32, tags=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.to_time = ToTimeMajor()
        self.rnn = nn.LSTM(dim, hidden)
        self.from_time = FromTimeMajor()
        self.head = nn.Linear(hidden, tags)

    def forward(self, ids):
        h, _ = self.rnn(self.to_time(self.emb(ids)))
        return self.head(self.from_time(h))


@bug(B, "lstm_tagger_view_to_time_major", "batch_dependence", "to_time",
     "(N, L, D) -> (L, N, D) for a time-major LSTM done with .view instead of .transpose(0, 1): rows of different "
     "samples are interleaved", where_also=["rnn", "from_time"])
def _():
    seed(2)
    model = TimeMajorTagger()
    return setup(model, tagging(seed_=2), tag_loss)


# ---------------------------------------------------------------- loss and labels

@bug(B, "tagger_ce_on_nlc_not_transposed", "loss_shape_broadcast", "loss",
     "nn.CrossEntropyLoss on (N, L, C) token logits and (N, L) tags without moving C to dim 1; crashes (the crash "
     "is the bug: a SetupError naming the loss is right)")
def _():
    seed(3)
    model = TETagger()
    return setup(model, tagging(seed_=3), nn.CrossEntropyLoss(ignore_index=-100))


@bug(B, "digits_onehot_float_labels_into_nllloss", "label_dtype", "data",
     "labels kept one-hot (float rows) from a Keras tutorial and fed to NLLLoss after log_softmax; crashes",
     where_also=["loss"])
def _():
    seed(4)
    model = GNCNN(out=nn.LogSoftmax(dim=1))
    X, y = digits_images()
    return setup(model, (X, F.one_hot(y, 10).float()), nn.NLLLoss())


@bug(B, "autoencoder_bce_on_standardised_pixels", "bce_targets_not_probabilities", "data",
     "a Sigmoid autoencoder trained with BCELoss against standardised pixels (-0.8 to 3): BCE targets outside [0, 1]",
     where_also=["loss"])
def _():
    seed(5)
    X, _y = digits_flat01()
    Xs = (X - X.mean()) / X.std()
    model = AutoEncoder(out=nn.Sigmoid())
    return setup(model, (Xs, Xs.clone()), nn.BCELoss())


@bug(B, "tagger_nll_on_raw_logits", "nll_without_log_softmax", "loss",
     "NLLLoss on the token tagger's raw logits (no log_softmax), (N, C, L) after a transpose")
def _():
    seed(6)
    model = TETagger()

    def loss_fn(out, y):
        return F.nll_loss(out.transpose(1, 2), y, ignore_index=-100)
    return setup(model, tagging(seed_=6), loss_fn)


@bug(B, "tagger_pad_labels_minus_one", "label_range", "data",
     "pad positions labelled -1 instead of -100, so cross-entropy sees a class -1; crashes", where_also=["loss"])
def _():
    seed(7)
    model = BiLSTMTagger()
    return setup(model, tagging(seed_=7, pad_label=-1), tag_loss)


@bug(B, "tagger_head_has_fewer_tags_than_data", "label_range", "data",
     "the tag set grew to 4 tags (0-3) but the tagger was built with tags=3; crashes", where_also=["head", "loss"])
def _():
    seed(8)
    model = TETagger(tags=3)
    return setup(model, tagging(seed_=8), tag_loss)


@bug(B, "autoencoder_loss_reduction_none", "loss_not_scalar", "loss",
     "MSELoss(reduction='none') kept from a per-pixel visualisation: the loss is (N, 64), backward() raises")
def _():
    seed(9)
    X, _y = digits_flat01()
    model = AutoEncoder()
    return setup(model, (X, X.clone()), nn.MSELoss(reduction="none"))


class KeepdimSiamese(Siamese):
    def forward(self, pairs):
        e1, e2 = self.embed(pairs[:, 0]), self.embed(pairs[:, 1])
        return torch.sqrt(((e1 - e2) ** 2).sum(1, keepdim=True) + 1e-9)


@bug(B, "siamese_distance_n1_against_n_targets", "loss_shape_broadcast", "loss",
     "the distance keeps a trailing dim (N, 1) (sum with keepdim) while the pair targets are (N,): the contrastive "
     "loss broadcasts to (N, N)")
def _():
    seed(10)
    model = KeepdimSiamese(mode="distance")

    def loss_fn(d, y):
        return (y * d ** 2 + (1 - y) * F.relu(1.0 - d) ** 2).mean()
    return setup(model, digit_pairs(), loss_fn)


@bug(B, "siamese_contrastive_negatives_unbounded", "loss_wrong_sign", "loss",
     "the contrastive loss without a margin: y d^2 - (1 - y) d^2 pushes different pairs apart without bound")
def _():
    seed(11)
    model = Siamese(mode="distance")

    def loss_fn(d, y):
        return (y * d ** 2 - (1 - y) * d ** 2).mean()
    return setup(model, digit_pairs(seed_=2), loss_fn)


@bug(B, "vae_kl_term_subtracted", "loss_wrong_sign", "loss",
     "the KL term subtracted instead of added (sign slip copying the ELBO): the loss falls without bound")
def _():
    seed(12)
    X, _y = digits_flat01()
    model = VAE()

    def loss_fn(out, x):
        recon, mu, logvar = out[:, :64], out[:, 64:72], out[:, 72:]
        rec = F.binary_cross_entropy_with_logits(recon, x, reduction="none").sum(1)
        kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(1)
        return ((rec - kl) / 64).mean()
    return setup(model, (X, X.clone()), loss_fn)


@bug(B, "poisson_log_input_false_on_log_rate", "unstable_math", "loss",
     "the net outputs a log-rate but PoissonNLLLoss(log_input=False) takes it as the rate: log of negative values",
     where_also=["head"])
def _():
    seed(13)
    model = Net(8, (32, 32))

    def loss_fn(out, y):
        return F.poisson_nll_loss(out.squeeze(1), y, log_input=False)
    return setup(model, count_table(seed_=1), loss_fn)


class Sqrt(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)


class SqrtStd(nn.Module):
    """Predicts a mean and a standard deviation as sqrt of a linear output (negative half the time)."""

    def __init__(self, d=10, hidden=48):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, hidden), nn.ReLU())
        self.mean_head = nn.Linear(hidden, 1)
        self.std_head = nn.Sequential(nn.Linear(hidden, 1), Sqrt())

    def forward(self, x):
        h = self.body(x)
        return torch.cat([self.mean_head(h), self.std_head(h) ** 2], 1)


@bug(B, "heteroscedastic_std_as_sqrt_of_linear", "nan_produced", "std_head.1",
     "the standard deviation as torch.sqrt of a linear output: NaN for every row where it is negative",
     where_also=["std_head"])
def _():
    seed(14)
    model = SqrtStd()
    return setup(model, skewed_regression(seed_=2), gaussian_loss)


class ExpSigmaMDN(nn.Module):
    """An MDN on an unscaled input (altitude in metres), sigma = exp(linear)."""

    def __init__(self, k=3, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, hidden), nn.ReLU())
        self.pi, self.mu = nn.Linear(hidden, k), nn.Linear(hidden, k)
        self.sigma = nn.Linear(hidden, k)

    def forward(self, x):
        h = self.body(x)
        return torch.cat([self.pi(h), self.mu(h), torch.exp(self.sigma(h))], 1)


@bug(B, "mdn_exp_sigma_on_unscaled_input", "unstable_math", "sigma",
     "an MDN with sigma = exp(linear) fed an input in metres (0-3000): exp overflows to inf at once",
     where_also=["data"])
def _():
    seed(15)
    from common_v3 import mdn_loss
    x, t = inverse_sine()
    model = ExpSigmaMDN()
    return setup(model, (x * 800 + 1500, t), mdn_loss)


# ---------------------------------------------------------------- gradients and optimizer

class DetachedAE(AutoEncoder):
    def forward(self, x):
        return self.decoder(self.encoder(x).detach())  # "to save memory", copied from a feature-extraction script


@bug(B, "autoencoder_code_detached", "detached_graph", "encoder",
     "the code is .detach()-ed between encoder and decoder: the encoder never gets a gradient",
     where_also=["encoder.0", "encoder.2"])
def _():
    seed(16)
    X, _y = digits_flat01()
    model = DetachedAE()
    return setup(model, (X, X.clone()), nn.MSELoss())


class TwoTower(nn.Module):
    """Query and item towers for same/different pairs; the item tower runs under no_grad ("embeddings are cached")."""

    def __init__(self):
        super().__init__()
        self.query_tower = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
        self.item_tower = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
        self.scale = nn.Parameter(torch.tensor(5.0))

    def forward(self, pairs):
        q = F.normalize(self.query_tower(pairs[:, 0]), dim=1)
        with torch.no_grad():
            d = F.normalize(self.item_tower(pairs[:, 1]), dim=1)
        return self.scale * (q * d).sum(1)


@bug(B, "two_tower_item_tower_under_no_grad", "detached_graph", "item_tower",
     "the item tower runs under torch.no_grad() (meant for a cache that was never built): it never learns",
     where_also=["item_tower.0", "item_tower.2"])
def _():
    seed(17)
    model = TwoTower()
    return setup(model, digit_pairs(seed_=3), nn.BCEWithLogitsLoss())


class NoGradTrunk(MultiTask):
    def forward(self, x):
        with torch.no_grad():  # left from an inference helper pasted into forward
            h = self.trunk(x)
        return torch.cat([self.cls_head(h), self.reg_head(h)], 1)


@bug(B, "multitask_trunk_under_no_grad", "detached_graph", "trunk",
     "the shared trunk runs under torch.no_grad() (pasted from an inference helper): only the heads learn",
     where_also=["trunk.0", "trunk.2"])
def _():
    seed(18)
    model = NoGradTrunk()
    return setup(model, multitask_data(), multitask_loss)


@bug(B, "multitask_reg_head_missing_from_optimizer", "optimizer_missing_params", "reg_head",
     "the optimizer lists the trunk and the class head; the regression head added later is not in it",
     where_also=["optimizer"])
def _():
    seed(19)
    model = MultiTask()
    opt = torch.optim.Adam(list(model.trunk.parameters()) + list(model.cls_head.parameters()), lr=1e-3)
    return setup(model, multitask_data(), multitask_loss, opt)


@bug(B, "vit_classifier_replaced_after_optimizer", "optimizer_missing_params", "classifier",
     "the ViT's classifier replaced (for 10 classes) after AdamW was built on the old one", where_also=["optimizer"])
def _():
    seed(20)
    model = tiny_vit(classes=5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.classifier = nn.Linear(32, 10)
    model.num_labels = model.config.num_labels = 10
    return setup(model, image_items(), hf_ce, opt)


@bug(B, "gn_cnn_optimizer_built_on_ema_copy", "optimizer_missing_params", "optimizer",
     "Adam built on the EMA copy's parameters (ema = deepcopy(model) made first) instead of the model's")
def _():
    seed(21)
    model = GNCNN()
    ema = copy.deepcopy(model)
    return setup(model, digits_images(), nn.CrossEntropyLoss(), adam(ema))


@bug(B, "autoencoder_optimizer_over_decoder_only", "optimizer_missing_params", "encoder",
     "Adam(model.decoder.parameters()) left from a decoder fine-tuning experiment: the encoder never updates",
     where_also=["optimizer", "encoder.0", "encoder.2"])
def _():
    seed(22)
    X, _y = digits_flat01()
    model = AutoEncoder()
    return setup(model, (X, X.clone()), nn.MSELoss(), adam(model.decoder))


@bug(B, "cnn_freeze_loop_after_new_head", "no_gradient", "head",
     "'freeze the backbone' loop run after the new head was attached: every parameter is frozen; backward raises",
     where_also=["optimizer"])
def _():
    seed(23)
    model = GNCNN(classes=5)
    model.head = nn.Linear(32, 10)
    for p in model.parameters():
        p.requires_grad_(False)
    return setup(model, digits_images(), nn.CrossEntropyLoss(), torch.optim.Adam(model.head.parameters(), lr=1e-3))


class ArgmaxRouter(nn.Module):
    """Picks one of 4 learned prototype vectors by the argmax of a gate, then classifies the prototype: the gate gets
    no gradient through the argmax."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(64, 4)
        self.prototypes = nn.Embedding(4, 16)
        self.head = nn.Linear(16 + 64, 10)

    def forward(self, x):
        k = self.gate(x).argmax(1)
        return self.head(torch.cat([self.prototypes(k), x], 1))


@bug(B, "router_gate_through_argmax", "no_gradient", "gate",
     "a hard router: argmax of a gate picks a prototype embedding; the gate never gets a gradient")
def _():
    seed(24)
    model = ArgmaxRouter()
    return setup(model, digits_flat01(), nn.CrossEntropyLoss())


@bug(B, "poisson_adam_lr_5", "lr_too_high", "optimizer", "Adam lr=5 (meant 5e-3) on a Poisson regression")
def _():
    seed(25)
    model = Net(8, (32, 32))
    return setup(model, count_table(seed_=2), poisson_loss, adam(model, 5.0))


@bug(B, "triplet_embedder_sgd_lr_1e-7", "lr_too_low", "optimizer", "SGD lr=1e-7 on a triplet embedder")
def _():
    seed(26)
    from common_v3 import batch_hard_triplet_loss
    model = Embedder()
    return setup(model, digits_flat01(), batch_hard_triplet_loss, torch.optim.SGD(model.parameters(), lr=1e-7))


@bug(B, "gn_cnn_lambda_lr_factor_meant_as_rate", "lr_too_low", "optimizer",
     "LambdaLR(lambda e: 1e-4): the 'target learning rate' 1e-4 given as a factor on 1e-3, so the rate is 1e-7",
     where_also=["loop"])
def _():
    seed(27)
    model = GNCNN()
    opt = adam(model, 1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1e-4)
    return setup(model, digits_images(), nn.CrossEntropyLoss(), opt, scheduler=sched)


@bug(B, "gn_cnn_sgd_weight_decay_1", "weight_decay_too_high", "optimizer",
     "SGD lr 0.05 momentum 0.9 with weight_decay=1.0 (meant 1e-4)")
def _():
    seed(28)
    model = GNCNN()
    return setup(model, digits_images(), nn.CrossEntropyLoss(),
                 torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1.0))


@bug(B, "roberta_adamw_lr_2", "lr_too_high", "optimizer", "RoBERTa (tiny config) fine-tuned with AdamW lr=2 (a "
     "config value read as a string 2e-5 split wrong)")
def _():
    seed(29)
    model = tiny_roberta()
    return setup(model, text_items(), hf_ce, torch.optim.AdamW(model.parameters(), lr=2.0))


# ---------------------------------------------------------------- data

@bug(B, "roberta_max_positions_equal_to_text_length", "index_out_of_range", "roberta.embeddings.position_embeddings",
     "RoBERTa numbers positions from pad_token_id + 1, so 24-token texts need max_position_embeddings > 24; it is 24 "
     "('index out of range in self'); crashes", where_also=["data"])
def _():
    seed(30)
    model = tiny_roberta(max_positions=24)
    return setup(model, text_items(max_len=24), hf_ce)


@bug(B, "tab_embed_category_ids_one_based", "index_out_of_range", "emb_a",
     "category codes 1..12 from a database (1-based) into nn.Embedding(12); crashes", where_also=["data"])
def _():
    seed(31)
    X, y = categorical_table(seed_=1)
    X = X.clone()
    X[:, 6] += 1
    model = TabEmbed()
    return setup(model, (X, y), nn.CrossEntropyLoss())


@bug(B, "tab_embed_price_target_in_dollars", "target_scale", "data",
     "a price regression (MSE) on the raw target in dollars (mean 250,000, std 80,000)", where_also=["loss"])
def _():
    seed(32)
    X, y = categorical_table(regression=True, seed_=2)
    model = TabEmbed(out=1)

    def loss_fn(out, t):
        return F.mse_loss(out.squeeze(1), t)
    return setup(model, (X, 250_000 + 80_000 * y), loss_fn)


@bug(B, "poisson_exposure_in_seconds_unscaled", "input_scale", "data",
     "an exposure feature in seconds (up to 6e7) appended to standardised features, not scaled")
def _():
    seed(33)
    X, y = count_table(exposure=True, seed_=3)
    X = X.clone()
    X[:, -1] *= 3.15e7
    model = Net(9, (32, 32))
    return setup(model, (X, y), poisson_loss)


@bug(B, "vit_pixels_0_255_not_normalised", "input_scale", "data",
     "ViT fed raw 0-255 pixel values (the image processor's rescale skipped)")
def _():
    seed(34)
    X, y = digits_flat01()
    model = tiny_vit()
    return setup(model, image_items((X * 255).reshape(-1, 1, 8, 8), y), hf_ce)


@bug(B, "tab_embed_segment_column_is_the_label", "label_leakage", "data",
     "a 'customer segment' column, computed downstream from the outcome, kept as a numeric feature")
def _():
    seed(35)
    X, y = categorical_table(seed_=3)
    segment = y.float() * 2 - 1 + 0.05 * torch.randn(len(y), generator=torch.Generator().manual_seed(35))
    X = torch.cat([X[:, :5], segment[:, None], X[:, 6:]], 1)
    model = TabEmbed()
    return setup(model, (X, y), nn.CrossEntropyLoss())


@bug(B, "gn_cnn_corner_pixel_watermark_label", "label_leakage", "data",
     "a scanning artefact: the top-left pixel holds the class id (the label stamped on each image)")
def _():
    seed(36)
    X, y = digits_images()
    X = X.clone()
    X[:, 0, 0, 0] = y.float() / 3.0
    model = GNCNN()
    return setup(model, (X, y), nn.CrossEntropyLoss())


@bug(B, "vit_test_split_jittered_train_images", "train_test_overlap", "data",
     "the 'test' images are training images with 1% pixel noise (an augmentation script wrote into the test folder)")
def _():
    seed(37)
    X, y = digits_images()
    model = tiny_vit()
    g = torch.Generator().manual_seed(37)
    Xt = X[:300] + 0.01 * torch.randn(X[:300].shape, generator=g)
    return setup(model, image_items(X, y), hf_ce, test_data=image_items(Xt, y[:300].clone()))


@bug(B, "ordinal_duplicate_rows_with_different_grades", "conflicting_labels", "data",
     "two raters' files merged: 300 rows appear twice with grades that differ by 1-3 levels", where_also=[])
def _():
    seed(38)
    X, y = ordinal_table(n=600, seed_=1)
    g = torch.Generator().manual_seed(38)
    shift = torch.randint(1, 4, (300,), generator=g)
    X2 = torch.cat([X, X[:300]])
    y2 = torch.cat([y, (y[:300] + shift) % 5])
    order = torch.randperm(len(X2), generator=g)
    model = Net(10, (64,), d_out=4)
    return setup(model, (X2[order], y2[order]), coral_loss)


@bug(B, "siamese_bn_embedding_last_batch_of_one", "batchnorm_batch_of_one", "embed.1",
     "BatchNorm1d in the embedding net and a DataLoader of 1,025 pairs in batches of 64 (drop_last=False): the last "
     "batch has one pair", where_also=["data", "embed"])
def _():
    seed(39)
    model = Siamese(batchnorm=True)
    X, y = digit_pairs(n=1025, seed_=4)
    return setup(model, loader(X, y, batch_size=64), nn.BCEWithLogitsLoss())


@bug(B, "tab_embed_failed_join_rows_all_zero", "blank_inputs", "data",
     "a left join that failed for a fifth of the rows left them all zeros (numeric and category codes alike)")
def _():
    seed(40)
    X, y = categorical_table(seed_=4)
    X = X.clone()
    X[::5] = 0.0
    model = TabEmbed()
    return setup(model, (X, y), nn.CrossEntropyLoss())


@bug(B, "autoencoder_pixels_with_nan", "non_finite_inputs", "data",
     "a few corrupted scans stored NaN pixels; the autoencoder's input (and target) carry them")
def _():
    seed(41)
    X, _y = digits_flat01()
    X = X.clone()
    X[::40, 10:14] = float("nan")
    model = AutoEncoder()
    return setup(model, (X, X.clone()), nn.MSELoss())


@bug(B, "ordinal_rows_sorted_by_grade_not_shuffled", "data_not_shuffled", "data",
     "rows exported sorted by grade, a DataLoader with shuffle=False")
def _():
    seed(42)
    X, y = ordinal_table(seed_=2)
    order = torch.argsort(y, stable=True)
    model = Net(10, (64,), d_out=4)
    return setup(model, loader(X[order], y[order], batch_size=32, shuffle=False), coral_loss)


class SpatialDrop(nn.Module):
    """Feature dropout written with F.dropout, whose `training` argument defaults to True."""

    def __init__(self, p=0.3):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p)


@bug(B, "gn_cnn_functional_dropout_ignores_eval", "dropout_left_on", "drop",
     "a dropout module calling F.dropout(x, p) without training=self.training: still dropping in eval()")
def _():
    seed(43)
    model = GNCNN(drop=SpatialDrop())
    return setup(model, digits_images(), nn.CrossEntropyLoss())


# ---------------------------------------------------------------- initialisation and activations

class CodeReLUAE(AutoEncoder):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU())
        nn.init.constant_(self.encoder[2].bias, -6.0)  # "sparse codes": a large negative bias


@bug(B, "autoencoder_code_relu_bias_minus_6", "dead_relu", "encoder.3",
     "a ReLU on the code with the code layer's bias initialised to -6 for 'sparse codes': every code unit is dead",
     where_also=["encoder.2", "encoder"])
def _():
    seed(44)
    X, _y = digits_flat01()
    model = CodeReLUAE()
    return setup(model, (X, X.clone()), nn.MSELoss())


class DeepAE(nn.Module):
    """An 8-layer tanh autoencoder initialised with N(0, 0.001) weights (copied from an RBM paper's init)."""

    def __init__(self):
        super().__init__()
        sizes = [64, 48, 32, 16, 8]
        enc, dec = [], []
        for a, b in zip(sizes, sizes[1:]):
            enc += [nn.Linear(a, b), nn.Tanh()]
        for a, b in zip(sizes[::-1], sizes[::-1][1:]):
            dec += [nn.Linear(a, b), nn.Tanh()]
        self.encoder, self.decoder = nn.Sequential(*enc), nn.Sequential(*dec[:-1])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=1e-3)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.decoder(self.encoder(x))


@bug(B, "deep_autoencoder_init_std_1e-3", "bad_init", "encoder",
     "an 8-layer tanh autoencoder initialised N(0, 0.001): activations and gradients vanish along depth",
     where_also=["decoder", "encoder.0"])
def _():
    seed(45)
    X, _y = digits_flat01()
    model = DeepAE()
    return setup(model, (X, X.clone()), nn.MSELoss())


@bug(B, "tab_embed_head_softmax_into_cross_entropy", "double_softmax", "head.1",
     "the head ends in nn.Softmax(dim=1) (for predict_proba) and the loss is CrossEntropyLoss", where_also=["head"])
def _():
    seed(46)
    model = TabEmbed(head_post=nn.Softmax(dim=1))
    return setup(model, categorical_table(seed_=5), nn.CrossEntropyLoss())


@bug(B, "siamese_sigmoid_head_into_bce_with_logits", "double_softmax", "head.1",
     "the pair head ends in nn.Sigmoid and the loss is BCEWithLogitsLoss", where_also=["head"])
def _():
    seed(47)
    model = Siamese(head_out=nn.Sigmoid())
    return setup(model, digit_pairs(seed_=5), nn.BCEWithLogitsLoss())
