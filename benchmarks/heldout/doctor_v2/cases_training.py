"""Training-phase faults: a healthy set-up whose loop, data or optimizer goes wrong at `onset`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_v2 import (  # noqa: E402
    AttnPoolGRU,
    BagOfEmbeddings,
    BiLSTMMean,
    F,
    Net,
    SignalCNN,
    SignalResNet,
    bce_rows,
    dict_batches,
    fault,
    hf_forward,
    keyword_text,
    moons,
    mse_rows,
    multilabel,
    multilabel_f1,
    nn,
    r2,
    regression,
    seed,
    signals,
    text_dataset,
    tiny_bert,
    tiny_distilbert,
    tiny_gpt2,
    torch,
)

CASES = []


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


@fault(CASES, "signal_lr_reset_to_5_after_resume", "lr_spike", "optimizer", 100, 180,
       "resuming from a checkpoint restored another run's param_groups: SGD's lr goes from 0.05 to 5")
def _():
    seed(0)
    X, y = signals()
    model = SignalCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"before": lambda s: s == 100 and set_lr(opt, 5.0)}}


@fault(CASES, "bert_lr_overwritten_mid_warmup_decay", "lr_spike", "optimizer", 90, 150,
       "a callback meant to log the lr writes the peak of another config (0.05) into AdamW's param_groups",
       where_also=["loop"])
def _():
    seed(1)
    model = tiny_bert(classes=4, vocab=80)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    ds = text_dataset()
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": {"stream": dict_batches(ds, 16), "forward": hf_forward,
                      "before": lambda s: s >= 90 and set_lr(opt, 0.05)}}


@fault(CASES, "distilbert_zero_grad_lost_in_refactor", "missing_zero_grad", "loop", 60, 130,
       "the training step was split into two functions; optimizer.zero_grad() went missing from step 60")
def _():
    seed(2)
    model = tiny_distilbert()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    ds = text_dataset()
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": {"stream": dict_batches(ds, 16), "forward": hf_forward, "zero_grad": lambda s: s < 60}}


@fault(CASES, "gpt2_zero_grad_only_on_log_steps", "missing_zero_grad", "loop", 50, 130,
       "from step 50 zero_grad() sits under `if step % 100 == 0` with the logging", where_also=["optimizer"])
def _():
    seed(3)
    model = tiny_gpt2(classes=4, vocab=80)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1)
    ds = text_dataset()
    return {"model": model, "data": ds, "loss_fn": F.cross_entropy, "optimizer": opt,
            "_loop": {"stream": dict_batches(ds, 16), "forward": hf_forward,
                      "zero_grad": lambda s: s < 50 or s % 100 == 0}}


@fault(CASES, "bag_step_behind_never_true_flag", "missing_optimizer_step", "loop", 80, 160,
       "from step 80 optimizer.step() runs only `if scaler_ok`, a flag nothing sets after the AMP code was removed")
def _():
    seed(4)
    ids, _, y = keyword_text()
    model = BagOfEmbeddings()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"do_step": lambda s: s < 80}}


@fault(CASES, "multilabel_clip_norm_1e-4_after_warmup", "clipping_swallows_update", "loop", 80, 160,
       "clipping switched on after warm-up with max_norm=1e-4 (meant 1.0): updates shrink to nothing",
       where_also=["optimizer"])
def _():
    seed(5)
    X, Y = multilabel()
    model = Net(20, (64, 64), 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return {"model": model, "data": (X, Y), "loss_fn": nn.BCEWithLogitsLoss(), "optimizer": opt,
            "_loop": {"loss": bce_rows, "metric": multilabel_f1, "metric_name": "f1",
                      "clip": lambda s: 1e-4 if s >= 80 else None}}


@fault(CASES, "signal_steplr_moved_into_batch_loop", "scheduler_per_batch", "optimizer", 96, 170,
       "StepLR(step_size=3 epochs, gamma=0.5) stepped per epoch until step 96, then inside the batch loop",
       where_also=["loop"])
def _():
    seed(6)
    X, y = signals(n=512)
    model = SignalResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt, "scheduler": sched,
            "_loop": {"sched_step": lambda s: s >= 96 or (s + 1) % 16 == 0}}


@fault(CASES, "regression_cosine_epochs_stepped_per_batch", "scheduler_per_batch", "optimizer", 64, 150,
       "CosineAnnealingLR(T_max=10 epochs) stepped per epoch, then per batch after a loop rewrite at step 64",
       where_also=["loop"])
def _():
    seed(7)
    X, y = regression()
    model = Net(10, (64, 64), 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    return {"model": model, "data": (X, y[:, None]), "loss_fn": nn.MSELoss(), "optimizer": opt, "scheduler": sched,
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2",
                      "sched_step": lambda s: s >= 64 or (s + 1) % 16 == 0}}


@fault(CASES, "gru_recurrent_layer_frozen_not_embedding", "layer_frozen_mid_run", "rnn", 90, 170,
       "meant to freeze the embedding after warm-up, froze the GRU (requires_grad_(False) on the wrong attribute)")
def _():
    seed(8)
    ids, _, y = keyword_text()
    model = AttnPoolGRU()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"before": lambda s: s == 90 and model.rnn.requires_grad_(False)}}


@fault(CASES, "lstm_body_left_out_of_stage_two_optimizer", "layer_frozen_mid_run", "lstm", 80, 160,
       "stage two builds a new optimizer over the head only (a fine-tuning stage copied in): the LSTM stops",
       where_also=["emb", "optimizer"])
def _():
    seed(9)
    ids, _, y = keyword_text()
    model = BiLSTMMean()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    head_opt = torch.optim.Adam(model.head.parameters(), lr=2e-3)

    def do_step(s):
        if s >= 80:
            head_opt.step()
            return False
        return True
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"do_step": do_step}}


@fault(CASES, "moons_second_shard_labels_shuffled", "labels_corrupted_mid_run", "data", 100, 200,
       "the second data shard was written with its label column shuffled")
def _():
    seed(10)
    X, y = moons(n=1024)
    model = Net(2, (64, 64), 2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(10)

    def batch_fn(s, batch):
        xb, yb = batch
        return (xb, yb[torch.randperm(len(yb), generator=g)]) if s >= 100 else batch
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": batch_fn}}


@fault(CASES, "signal_classes_remapped_off_by_one", "labels_corrupted_mid_run", "data", 100, 190,
       "a new label map for the second half of the recordings shifts every class by one")
def _():
    seed(11)
    X, y = signals()
    model = SignalCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": lambda s, b: (b[0], (b[1] + 1) % 4) if s >= 100 else b}}


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)


@fault(CASES, "log_of_counts_meets_zero_counts", "nan_produced", "logf", 90, 150,
       "log-transformed count features; from step 90 a shard with zero and negative (corrected) counts arrives")
def _():
    seed(12)
    X, y = regression(n=512, features=8)
    counts = torch.exp(X)  # positive "counts"

    class CountNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.logf = LogFeatures()
            self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
            self.head = nn.Linear(32, 1)

        def forward(self, x):
            return self.head(self.body(self.logf(x)))
    model = CountNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def batch_fn(s, batch):
        xb, yb = batch
        if s >= 90:
            xb = xb.clone()
            xb[::4, 2] = 0.0
            xb[1::4, 3] = -0.5
        return xb, yb
    return {"model": model, "data": (counts, y[:, None]), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2", "batch_fn": batch_fn}}


@fault(CASES, "row_norm_without_eps_meets_flat_rows", "nan_produced", "norm", 100, 160,
       "a hand-written per-row normalisation (x - mean) / std with no eps; stuck sensors (flat rows) from step 100")
def _():
    seed(13)
    X, y = signals()

    class RowNorm(nn.Module):
        def forward(self, x):
            return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)

    class Normed(SignalCNN):
        def __init__(self):
            super().__init__()
            self.norm = RowNorm()

        def forward(self, x):
            return super().forward(self.norm(x))
    model = Normed()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def batch_fn(s, batch):
        xb, yb = batch
        if s >= 100:
            xb = xb.clone()
            xb[:3] = 0.7
        return xb, yb
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": batch_fn}}


@fault(CASES, "sqrt_energy_after_dc_offset_removed", "nan_produced", "compress", 100, 160,
       "features compressed by sqrt (energies, always >= 0); from step 100 a shard has its mean removed")
def _():
    seed(14)
    X, _ = regression(n=512, features=10)
    energy = X ** 2
    w = torch.linspace(-1.0, 1.0, 10)
    y = X.abs() @ w + 0.1 * torch.randn(512)  # the target depends on the amplitudes sqrt(energy)
    y = (y - y.mean()) / y.std()

    class Sqrt(nn.Module):
        def forward(self, x):
            return torch.sqrt(x)

    class EnergyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.compress = Sqrt()
            self.body = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))

        def forward(self, x):
            return self.body(self.compress(x))
    model = EnergyNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "data": (energy, y[:, None]), "loss_fn": nn.MSELoss(), "optimizer": opt,
            "_loop": {"loss": mse_rows, "metric": r2, "metric_name": "r2",
                      "batch_fn": lambda s, b: (b[0] - b[0].mean(), b[1]) if s >= 100 else b}}


@fault(CASES, "attention_pool_minus_inf_meets_empty_texts", "nan_produced", "pool", 100, 160,
       "attention pooling masks pads with -inf; from step 100 empty texts (all padding) arrive from a new source")
def _():
    seed(15)
    ids, _, y = keyword_text()

    class MaskedPool(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.score = nn.Linear(hidden, 1)

        def forward(self, h, pad):
            s = self.score(h).squeeze(-1).masked_fill(pad, float("-inf"))
            return (torch.softmax(s, dim=1).unsqueeze(-1) * h).sum(1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(80, 32, padding_idx=0)
            self.rnn = nn.GRU(32, 32, batch_first=True)
            self.pool = MaskedPool(32)
            self.head = nn.Linear(32, 4)

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.head(self.pool(h, ids == 0))
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def batch_fn(s, batch):
        xb, yb = batch
        if s >= 100:
            xb = xb.clone()
            xb[:2] = 0
        return xb, yb
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_loop": {"batch_fn": batch_fn}}


_ = (tiny_distilbert, BiLSTMMean)
