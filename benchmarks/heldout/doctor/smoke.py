"""Runs every case's build() (one forward, loss, backward, step on a batch) and train() with plain torch and a
stand-in cockpit, and prints what happened. No activis involved."""

import glob
import importlib.util
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class StandInCockpit:
    def __init__(self, model, optimizer):
        self.model, self.optimizer, self.losses, self.metrics = model, optimizer, [], []

    def backward(self, losses):
        loss = losses.mean()
        self.losses.append(float(loss))
        loss.backward()

    def log_metrics(self, step, **metrics):
        self.metrics.append((step, metrics))


def load_cases(pattern="cases_*.py"):
    cases = []
    for path in sorted(glob.glob(os.path.join(HERE, pattern))):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cases += module.CASES
    return cases


def first_batch(data):
    if isinstance(data, (tuple, list)):
        return data[0][:32], data[1][:32]
    if isinstance(data, torch.utils.data.DataLoader):
        return next(iter(data))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    return next(iter(loader))


def try_build(case):
    setup = case["build"]()
    model, loss_fn = setup["model"], setup["loss_fn"]
    batch = first_batch(setup["data"])
    if isinstance(batch, dict):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        y = batch["labels"]
    else:
        out = model(batch[0])
        y = batch[1]
    loss = loss_fn(out, y)
    loss.mean().backward() if loss.dim() else loss.backward()
    return f"loss {float(loss.mean()):.4g} shape {tuple(loss.shape)}"


def main():
    torch.set_num_threads(1)
    pattern = sys.argv[1] if len(sys.argv) > 1 else "cases_*.py"
    for case in load_cases(pattern):
        t = time.time()
        try:
            msg = try_build(case)
        except Exception as e:  # noqa: BLE001 - bugs are meant to fail
            msg = f"raises {type(e).__name__}: {str(e)[:90]}"
        line = f"{case['kind']:7} {case['phase']:8} {case['name'][:44]:44} build: {msg}"
        if case.get("train"):
            try:
                cp = case["train"](StandInCockpit, case["steps"])
                ls = cp.losses
                k = len(ls) // 4 or 1
                line += f" | train {len(ls)} steps, loss {sum(ls[:k]) / k:.3g} -> {sum(ls[-k:]) / k:.3g}"
                onset = case.get("onset")
                if onset:
                    before, after = ls[max(0, onset - k):onset] or [float("nan")], ls[onset:onset + k]
                    line += f" (before onset {sum(before) / len(before):.3g}, after {sum(after) / len(after):.3g})"
            except Exception as e:  # noqa: BLE001
                line += f" | train FAILS {type(e).__name__}: {str(e)[:120]}"
        print(line + f" [{time.time() - t:.1f}s]", flush=True)


if __name__ == "__main__":
    main()
