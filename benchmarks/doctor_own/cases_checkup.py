"""Checkup-phase bugs practitioners report, on families the held-out sets lack."""

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
    bug,
    classification,
    counts,
    digits_images,
    keyword_text,
    logits_of,
    mlp,
    multitask_data,
    multitask_loss,
    nn,
    regression,
    seed,
    tabular_categorical,
    tagging,
    tiny_roberta,
    tiny_vit,
    torch,
)

CASES = []


def digits_flat():
    X, y = digits_images()
    return X.flatten(1), y


@bug(CASES, "cnn_log_softmax_over_batch_dim_into_nll", "batch_dependence", "out",
     "the head ends in LogSoftmax(dim=0): each sample's log-probabilities depend on the rest of the batch",
     where_also=["loss"])
def _():
    seed(0)
    X, y = digits_images()
    model = nn.Sequential()
    model.add_module("cnn", NormCNN())
    model.add_module("out", nn.LogSoftmax(dim=0))
    return {"model": model, "data": (X, y), "loss_fn": nn.NLLLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "tagger_cross_entropy_on_NLC", "loss_shape_broadcast", "loss",
     "CrossEntropyLoss given the tagger's (N, L, C) logits as they are: it reads L as the class axis "
     "(here L == C, so it runs)", where_also=["data"])
def _():
    seed(1)
    ids, tags = tagging(max_len=5, tags=5)
    model = Tagger(max_len=5)
    return {"model": model, "data": (ids, tags), "loss_fn": nn.CrossEntropyLoss(ignore_index=-100),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "gn_cnn_requires_grad_false_left_on_conv2", "no_gradient", "conv2",
     "a fine-tuning notebook froze conv2 for a warm-up and the unfreeze cell was never run")
def _():
    seed(2)
    X, y = digits_images()
    model = NormCNN()
    model.conv2.requires_grad_(False)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "vit_classifier_replaced_after_optimizer", "optimizer_missing_params", "classifier",
     "the ViT's classifier was swapped for a 10-class one after AdamW was built on the old parameters")
def _():
    seed(3)
    X, y = digits_images()
    model = tiny_vit(classes=3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.classifier = nn.Linear(32, 10)
    return {"model": model, "data": (X, y), "loss_fn": lambda o, t: F.cross_entropy(logits_of(o), t),
            "optimizer": opt}


@bug(CASES, "autoencoder_encoder_output_detached", "detached_graph", "encoder",
     "the code is .detach()ed to log it and the detached tensor is decoded: the encoder never learns",
     where_also=["encoder.1", "encoder.3"])
def _():
    seed(4)
    X, _ = digits_images()
    flat = X.flatten(1)

    class AE(AutoEncoder):
        def forward(self, x):
            return self.decoder(self.encoder(x).detach())
    model = AE()
    return {"model": model, "data": (flat, flat), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "tabular_embeddings_under_no_grad", "no_gradient", "embs",
     "the categorical lookups were wrapped in torch.no_grad() copied from an inference helper",
     where_also=["embs.0", "embs.1"])
def _():
    seed(5)
    X, y = tabular_categorical()

    class T(TabEmbed):
        def forward(self, x):
            with torch.no_grad():
                cats = [e(x[:, self.numeric + i].long()) for i, e in enumerate(self.embs)]
            return self.mlp(torch.cat([x[:, :self.numeric], *cats], 1))
    model = T()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "one_hot_labels_to_nll", "label_dtype", "data",
     "labels one-hot encoded (float (N, 10)) for a model ending in log_softmax with NLLLoss", where_also=["loss"])
def _():
    seed(6)
    X, y = digits_flat()
    model = nn.Sequential(mlp(64, 10), nn.LogSoftmax(1))
    return {"model": model, "data": (X, F.one_hot(y, 10).float()), "loss_fn": nn.NLLLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "house_prices_in_thousands", "target_scale", "data",
     "prices kept in dollars (1e5-1e6) against an MSE head initialised near 0", where_also=["loss"])
def _():
    seed(7)
    X, y = regression(seed_=7)
    model = mlp(X.shape[1], 1)
    return {"model": model, "data": (X, (y * 1e5 + 3e5).unsqueeze(1)), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "poisson_counts_times_1000", "target_scale", "data",
     "counts recorded per thousand visits (x1000) fed to an MSE regression", where_also=["loss"])
def _():
    seed(8)
    X, c = counts()
    model = mlp(X.shape[1], 1)
    return {"model": model, "data": (X, (c * 1000).unsqueeze(1)), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "tabular_label_copied_into_a_feature", "label_leakage", "data",
     "a 'was_approved' column joined from the outcome table sits among the numeric features")
def _():
    seed(9)
    X, y = tabular_categorical()
    X = X.clone()
    X[:, 2] = y.float() + 0.05 * torch.randn(len(y))
    model = TabEmbed()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "digits_test_rows_are_jittered_train_rows", "train_test_overlap", "data",
     "the 'test' split is the training images with 1 % pixel noise added (a re-export of the same scans)")
def _():
    seed(10)
    X, y = digits_flat()
    model = mlp(64, 10)
    test = X[:300] + 0.01 * torch.randn(300, 64)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "test_data": (test, y[:300]),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "multitask_adam_lr_5", "lr_too_high", "optimizer", "Adam lr 5 (a typo for 5e-3) on a multi-task net")
def _():
    seed(11)
    X, T = multitask_data()
    model = MultiTask(X.shape[1])
    return {"model": model, "data": (X, T), "loss_fn": multitask_loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=5.0)}


@bug(CASES, "roberta_adamw_lr_1e-9", "lr_too_low", "optimizer", "AdamW lr 1e-9 (a unit slip from 1e-5 to 1e-9)")
def _():
    seed(12)
    ids, mask, labels = keyword_text(seed_=12)
    model = tiny_roberta()
    return {"model": model, "data": DictDataset(ids, mask, labels), "loss_fn": F.cross_entropy,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-9)}


@bug(CASES, "gn_cnn_sgd_weight_decay_1", "weight_decay_too_high", "optimizer",
     "SGD weight_decay=1 (meant 1e-4)")
def _():
    seed(13)
    X, y = digits_images()
    model = NormCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1.0)}


@bug(CASES, "digits_pixels_0_255", "input_scale", "data", "pixels left in 0-255 (x 16 scale, 0-255)")
def _():
    seed(14)
    X, y = digits_images()
    model = NormCNN()
    return {"model": model, "data": (X * 255, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "quantile_loss_sign_flipped", "loss_wrong_sign", "loss",
     "the pinball loss written with the quantile weights swapped to negative: minimised by running away")
def _():
    seed(15)
    X, y = regression(seed_=15)
    q = torch.tensor([0.1, 0.5, 0.9])
    model = mlp(X.shape[1], 3)

    def pinball(out, t):
        e = t.reshape(-1, 1) - out
        return -torch.maximum(q * e, (q - 1) * e).mean()
    return {"model": model, "data": (X, y), "loss_fn": pinball,
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "siamese_contrastive_per_pair_loss", "loss_not_scalar", "loss",
     "the contrastive loss returns one value per pair (no .mean())")
def _():
    seed(16)
    X, y = digits_flat()
    pairs = torch.stack([X[:800], X[800:1600]], 1)
    target = (y[:800] == y[800:1600]).float()
    from common_own import Siamese
    model = Siamese()
    return {"model": model, "data": (pairs, target),
            "loss_fn": lambda d, t: t * d.pow(2) + (1 - t) * F.relu(1 - d).pow(2),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "ordinal_grades_1_to_5_for_cross_entropy", "label_range", "data",
     "grades stored 1..5 into a 5-way CrossEntropyLoss", where_also=["loss"])
def _():
    seed(17)
    from common_own import ordinal
    X, g = ordinal()
    model = mlp(X.shape[1], 5)
    return {"model": model, "data": (X, g + 1), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "tabular_category_ids_past_table", "index_out_of_range", "embs.1",
     "the second categorical column got new levels in the latest export (ids up to 14, table of 12)")
def _():
    seed(18)
    X, y = tabular_categorical()
    X = X.clone()
    X[::7, 7] = 14.0
    model = TabEmbed()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "autoencoder_bce_on_pixels_0_16", "bce_targets_not_probabilities", "data",
     "BCELoss reconstruction against raw 0-16 pixel intensities", where_also=["loss"])
def _():
    seed(19)
    X, _ = digits_images()
    flat = X.flatten(1)
    model = AutoEncoder()
    return {"model": model, "data": (flat, flat * 16), "loss_fn": nn.BCELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "ln_cnn_softmax_then_cross_entropy", "double_softmax", "head_softmax",
     "a Softmax at the end of the model, then CrossEntropyLoss", where_also=["loss"])
def _():
    seed(20)
    X, y = digits_images()
    model = nn.Sequential()
    model.add_module("cnn", NormCNN(norm="layer"))
    model.add_module("head_softmax", nn.Softmax(dim=1))
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


class ToSequence(nn.Module):
    """(N, C, L) feature maps to (N, L, C) rows for a per-position layer: written with a reshape of the
    transpose of the wrong axes (batch and channels), which mixes samples."""

    def forward(self, h):
        return h.transpose(0, 1).reshape(h.shape[0], h.shape[2], h.shape[1])


@bug(CASES, "conv1d_features_reshaped_across_batch", "batch_dependence", "to_seq",
     "a reshape meant to swap channels and positions swapped batch and channels: rows mix samples",
     where_also=["proj"])
def _():
    seed(21)
    X, y = digits_images()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(8, 16, 3, padding=1)
            self.to_seq = ToSequence()
            self.proj = nn.Linear(16, 8)
            self.head = nn.Linear(8 * 8, 10)

        def forward(self, x):
            h = torch.relu(self.conv(x.squeeze(1)))  # (N, 16, 8)
            return self.head(torch.relu(self.proj(self.to_seq(h))).flatten(1))
    model = M()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@bug(CASES, "roberta_tokenizer_vocab_past_embeddings", "index_out_of_range", "roberta.embeddings.word_embeddings",
     "ids from a tokenizer with 120 tokens into a RoBERTa config of 80")
def _():
    seed(22)
    ids, mask, labels = keyword_text(vocab=120, seed_=22)
    model = tiny_roberta(vocab=80)
    return {"model": model, "data": DictDataset(ids, mask, labels), "loss_fn": F.cross_entropy,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3)}


@bug(CASES, "classification_tiny_feature_nan", "non_finite_inputs", "data",
     "a log-transformed feature with zeros in it: -inf in the inputs")
def _():
    seed(23)
    X, y = classification(seed_=23)
    X = X.clone()
    X[::9, 3] = float("-inf")
    model = mlp(X.shape[1], 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}
