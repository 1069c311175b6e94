"""Healthy recipes on padded text: GRU/LSTM with packing, a masked transformer, tiny BERT and GPT-2 fine-tunes."""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import (  # noqa: E402
    DictDataset,
    MaskedMeanText,
    RNNText,
    TinyTransformer,
    dict_batches,
    hf_forward,
    nn,
    register_healthy,
    seed,
    split,
    text_data,
    tiny_bert,
    tiny_gpt2,
    torch,
)

CASES = []
STEPS = 120


def healthy(name, note, steps=STEPS):
    return register_healthy(CASES, name, note, steps)


def _text(n=512, max_len=20, seed_=0):
    ids, _, mask, y = text_data(n=n, max_len=max_len, seed_=seed_)
    return ids, mask, y


@healthy("gru_packed_padded_text", "GRU over packed, right-padded sequences (pad 0, padding_idx=0), Adam, "
         "clip_grad_norm_ 1.0")
def _():
    seed(300)
    ids, _, y = _text(seed_=300)
    train, test = split(ids, y)
    model = RNNText(cell="gru")
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3), "_batch": 32, "_clip": 1.0}


@healthy("lstm_packed_padded_text", "LSTM over packed sequences, RMSprop lr 2e-3, batches of 32")
def _():
    seed(301)
    ids, _, y = _text(seed_=301)
    model = RNNText(cell="lstm")
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.RMSprop(model.parameters(), lr=2e-3), "_batch": 32}


@healthy("gru_frozen_pretrained_embeddings", "embeddings loaded from a 'pretrained' table and frozen on purpose "
         "(freeze=True); the optimizer gets every parameter, frozen ones included")
def _():
    seed(302)
    ids, _, y = _text(seed_=302)
    model = RNNText(cell="gru")
    table = torch.randn(50, 32) * 0.3
    table[0] = 0
    model.emb = nn.Embedding.from_pretrained(table, freeze=True, padding_idx=0)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3), "_batch": 32}


class LengthBuckets:
    """Batches of similar length (sorted into buckets, buckets shuffled): the bucketing recipe for RNNs."""

    def __init__(self, ids, y, batch=32, seed_=0):
        lengths = (ids != 0).sum(1)
        order = torch.argsort(lengths, stable=True)
        self.chunks = [order[i: i + batch] for i in range(0, len(order) - batch + 1, batch)]
        self.ids, self.y, self.g, self.queue = ids, y, torch.Generator().manual_seed(seed_), []

    def __next__(self):
        if not self.queue:
            self.queue = [self.chunks[i] for i in torch.randperm(len(self.chunks), generator=self.g)]
        idx = self.queue.pop()
        width = int((self.ids[idx] != 0).sum(1).max())
        return self.ids[idx, :width], self.y[idx]


@healthy("gru_length_bucketed_batches", "batches bucketed by length, buckets in random order (labels do not "
         "depend on length)")
def _():
    seed(303)
    ids, _, y = _text(seed_=303)
    model = RNNText(cell="gru")
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3), "_stream": LengthBuckets(ids, y)}


@healthy("conv_text_masked_mean", "embedding, Conv1d, mean over real tokens only, AdamW")
def _():
    seed(304)
    ids, _, y = _text(seed_=304)
    model = MaskedMeanText()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01), "_batch": 32}


def linear_warmup_decay(opt, warmup, total):
    """transformers' get_linear_schedule_with_warmup, written out: from lr 0 up, then linearly down to 0."""
    def factor(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


@healthy("transformer_encoder_warmup_adamw", "nn.TransformerEncoder with key padding mask, dropout 0.1, "
         "AdamW with warm-up from 0 over 20 steps and linear decay")
def _():
    seed(305)
    ids, _, y = _text(seed_=305, max_len=16)
    model = TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": linear_warmup_decay(opt, 20, STEPS), "_batch": 32}


def _no_decay_groups(model, weight_decay):
    """The usual fine-tune grouping: no weight decay on biases and LayerNorm weights."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name or ".ln_" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@healthy("bert_tiny_adamw_finetune", "BertForSequenceClassification from a tiny config, AdamW 2e-3 with no-decay "
         "groups, linear warm-up 10 % then decay, batches of 16")
def _():
    seed(306)
    ids, mask, y = _text(n=256, max_len=16, seed_=306)
    model = tiny_bert()
    opt = torch.optim.AdamW(_no_decay_groups(model, 0.01), lr=2e-3)
    data = DictDataset(ids, mask, y)
    return {"model": model, "data": data, "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": linear_warmup_decay(opt, STEPS // 10, STEPS), "_stream": dict_batches(data, 16),
            "_forward": hf_forward}


@healthy("gpt2_tiny_scaled_init_wd_0.1", "GPT2ForSequenceClassification from a tiny config (its own scaled "
         "residual init), AdamW(betas=(0.9, 0.95), weight_decay=0.1), warm-up then cosine, left padding")
def _():
    seed(307)
    ids, mask, y = _text(n=256, max_len=16, seed_=307)
    lengths = mask.sum(1)
    shift = (16 - lengths)[:, None]
    pos = (torch.arange(16)[None, :] - shift) % 16
    ids, mask = ids.gather(1, pos), mask.gather(1, pos)  # left padding, as decoder models are fed
    model = tiny_gpt2()
    opt = torch.optim.AdamW(_no_decay_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95))

    def factor(step, warmup=15):
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (STEPS - warmup)))
    data = DictDataset(ids, mask, y)
    return {"model": model, "data": data, "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.LambdaLR(opt, factor), "_stream": dict_batches(data, 16),
            "_forward": hf_forward, "_clip": 1.0}


@healthy("bert_tiny_frozen_embeddings_small_batches", "tiny BERT with its embeddings frozen on purpose, "
         "batches of 8, AdamW 1e-3, constant lr")
def _():
    seed(308)
    ids, mask, y = _text(n=256, max_len=16, seed_=308)
    model = tiny_bert()
    model.bert.embeddings.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    data = DictDataset(ids, mask, y)
    return {"model": model, "data": data, "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "_stream": dict_batches(data, 8), "_forward": hf_forward}


assert len({c["name"] for c in CASES}) == len(CASES)
