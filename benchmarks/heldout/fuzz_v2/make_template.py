"""Writes `template_run/`: a real run record made by activis's public API (a cockpit step log, a probe store with
checkpoints 0, 5, 10, parameters, per-instance dynamics), which the fuzz cases copy and then damage or misuse.

    python make_template.py [--tree /path/to/activis]"""

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if "--tree" in sys.argv:
        sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
    import torch
    import torch.nn.functional as F
    from fuzz_v2_common import mlp, wine
    from torch.utils.data import DataLoader, TensorDataset

    import activis

    X, y = wine(120)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = os.path.join(HERE, "template_run")
    shutil.rmtree(path, ignore_errors=True)
    cockpit = activis.Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, log_dir=path)
    probe = activis.Checkpoints(model, (X[:60], y[:60]), path, every=5, class_names=["a", "b", "c"], params=True)
    loader = DataLoader(TensorDataset(X, y, torch.arange(len(X))), batch_size=20, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    step = 0
    with activis.DynamicsRecorder(path) as recorder:
        for _ in range(2):
            for xb, yb, index in loader:
                probe(step)
                opt.zero_grad()
                logits = model(xb)
                losses = F.cross_entropy(logits, yb, reduction="none")
                recorder.record(step, index, logits, yb, losses)
                cockpit.backward(losses)
                opt.step()
                step += 1
    cockpit.close()
    run = activis.open_run(path)
    print(run, run.checkpoints, step)


if __name__ == "__main__":
    main()
