"""Runs every case's build() (one forward, loss, backward on a batch) and train() with plain torch and a stand-in
cockpit, and prints what happened. No activis involved. The first set's smoke runner, pointed at this folder, with
dict batches passed to forward by name (ViT takes `pixel_values`, not `input_ids`).

    python smoke.py [cases_x.py]"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_spec = importlib.util.spec_from_file_location("smoke_v1", os.path.join(os.path.dirname(HERE), "doctor", "smoke.py"))
_v1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_v1)
_v1.HERE = HERE  # load_cases reads the case files of this folder
StandInCockpit, first_batch, load_cases = _v1.StandInCockpit, _v1.first_batch, _v1.load_cases


def try_build(case):
    setup = case["build"]()
    model, loss_fn = setup["model"], setup["loss_fn"]
    batch = first_batch(setup["data"])
    if isinstance(batch, dict):
        out = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        y = batch["labels"]
    else:
        out = model(batch[0])
        y = batch[1]
    loss = loss_fn(out, y)
    loss.mean().backward() if loss.dim() else loss.backward()
    if setup.get("optimizer") is not None:
        setup["optimizer"].step()
    return f"loss {float(loss.mean()):.4g} shape {tuple(loss.shape)}"


_v1.try_build = try_build

if __name__ == "__main__":
    _v1.main()
