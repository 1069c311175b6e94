"""Trains every data-map case the README's way (a plain loop in a run record made by `Run.create`, with
`activis.Checkpoints` capturing the training set at each epoch's start and `activis.DynamicsRecorder` keeping each
presentation's logits), reads the data map back through activis, checks it against Cartography's published
definitions computed here from the same logits, and scores its regions against the planted truth.

    python run_datamap.py [--tree /path/to/activis] [--out results.jsonl] [-k name]

Per case, one JSON line:
  reference      data maps computed here (numpy, float64): from the logits the loop itself saw (train-mode forward
                 of each presentation) and from the model's eval-mode logits over the training set at each epoch's
                 start (what the checkpoints capture); confidence = mean softmax probability of the given label,
                 variability = its population std, correctness; regions by the README's rule (ambiguous:
                 variability >= 0.2; else easy: confidence >= 0.5; else hard)
  routes         `data_map(read_dynamics(run/dynamics).presentations(), labels)` (against the loop's logits),
                 `open_run(run).data_map()` (against the checkpoints' logits) and
                 `open_run(run).data_map(source="training")` (not in the README; named by one of activis's error
                 messages; against the loop's logits): each its agreement with its reference (max |difference| of
                 confidence and variability, share of equal regions) or the error it raised
  scores         for the first route that ran (the references' beside it): precision / recall of "hard to learn"
                 against the flipped labels; AUC of -confidence for flipped vs clean; AUC of variability for
                 ambiguous vs the other unflipped items; precision / recall of the "ambiguous" region against the
                 ambiguous items; regions' sizes; mean forgetting of flipped and clean items (activis's column)
Outcome per case: "matches" (every route ran, equal to its reference to 1e-6 and every region equal), "differs"
(a number or region differs: silently wrong unless a README rule explains it), "error" (a route raised)."""

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTES = ("data_map", "run.data_map", "run.data_map(source='training')")


def train(setup, run_dir):
    """The README's loop in a run record made by `Run.create`: the dataset gives each instance's index; the recorder
    keeps what the loop computed."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from activis import Checkpoints, DynamicsRecorder, Run

    Run.create(run_dir, name="datamap", config={"epochs": setup["epochs"], "batch_size": setup["batch_size"]})
    model, X, y = setup["model"], setup["X"], setup["y"]
    opt = setup["optimizer"](model.parameters())
    data = DataLoader(TensorDataset(X, y, torch.arange(len(X))), batch_size=setup["batch_size"], shuffle=True,
                      generator=torch.Generator().manual_seed(0))
    per_epoch = len(data)
    epoch_starts = [e * per_epoch for e in range(setup["epochs"])]
    classes = int(y.max()) + 1
    checkpoints = Checkpoints(model, (X, y), run_dir, steps=epoch_starts,
                              class_names=[str(c) for c in range(classes)])
    seen, probed = None, []
    with DynamicsRecorder(run_dir) as recorder:
        step = 0
        for epoch in range(setup["epochs"]):
            model.eval()  # what the probe sees at this checkpoint (these models have no dropout or BatchNorm)
            with torch.no_grad():
                probed.append(model(X).double().numpy())
            model.train()
            for xb, yb, index in data:
                checkpoints(step)
                logits = model(xb)
                losses = F.cross_entropy(logits, yb, reduction="none")
                recorder.record(step, index, logits, yb, losses)
                if seen is None:
                    seen = np.full((setup["epochs"], len(X), logits.shape[1]), np.nan)
                seen[epoch, index.numpy()] = logits.detach().double().numpy()
                opt.zero_grad()
                losses.mean().backward()
                opt.step()
                step += 1
    model.eval()
    with torch.no_grad():
        final = model(X).argmax(1).numpy()
    return seen, np.stack(probed), final


def reference_map(logits, labels):
    z = logits - logits.max(2, keepdims=True)
    p = np.exp(z)
    p /= p.sum(2, keepdims=True)
    p_true = p[:, np.arange(len(labels)), labels]
    confidence, variability = p_true.mean(0), p_true.std(0)
    correctness = (logits.argmax(2) == labels[None]).mean(0)
    region = np.where(variability >= 0.2, "ambiguous", np.where(confidence >= 0.5, "easy to learn", "hard to learn"))
    return {"confidence": confidence, "variability": variability, "correctness": correctness, "region": region}


def auc(scores, positive):
    from sklearn.metrics import roc_auc_score
    positive = np.asarray(positive, bool)
    if positive.all() or not positive.any():
        return None
    return round(float(roc_auc_score(positive, scores)), 4)


def pr(selected, truth):
    selected, truth = np.asarray(selected, bool), np.asarray(truth, bool)
    if not truth.any():
        return {"selected": int(selected.sum()), "precision": None, "recall": None}
    tp = int((selected & truth).sum())
    return {"selected": int(selected.sum()), "precision": round(tp / selected.sum(), 4) if selected.any() else None,
            "recall": round(tp / truth.sum(), 4)}


def scores_of(m, flipped, ambiguous):
    region = np.asarray(m["region"]).astype(str)
    clean = ~flipped
    out = {"hard_to_learn_vs_flipped": pr(region == "hard to learn", flipped),
           "auc_low_confidence_flipped": auc(-np.asarray(m["confidence"], float), flipped),
           "ambiguous_region_vs_ambiguous": pr(region == "ambiguous", ambiguous),
           "auc_variability_ambiguous": auc(np.asarray(m["variability"], float)[clean], ambiguous[clean])
           if ambiguous.any() else None,
           "regions": {r: int((region == r).sum()) for r in ("easy to learn", "ambiguous", "hard to learn")}}
    if "forgetting" in m:
        f = np.asarray(m["forgetting"], float)
        out["mean_forgetting"] = {"flipped": round(float(f[flipped].mean()), 3),
                                  "clean": round(float(f[clean].mean()), 3)}
    return out


def agreement(dm, ref):
    frame = {c: np.asarray(dm[c]) for c in ("confidence", "variability", "region")}
    if len(frame["confidence"]) != len(ref["confidence"]):
        return {"rows": len(frame["confidence"]), "expected_rows": len(ref["confidence"]), "matches": False}
    dc = float(np.max(np.abs(frame["confidence"].astype(float) - ref["confidence"])))
    dv = float(np.max(np.abs(frame["variability"].astype(float) - ref["variability"])))
    same = float(np.mean(frame["region"].astype(str) == ref["region"]))
    return {"max_diff_confidence": dc, "max_diff_variability": dv, "regions_equal": round(same, 4),
            "matches": bool(dc <= 1e-6 and dv <= 1e-6 and same == 1.0)}


def _error(e):
    return {"type": type(e).__name__, "module": type(e).__module__, "message": str(e)[:300],
            "at": "".join(traceback.format_tb(e.__traceback__)[-1:])[-300:]}


def run_case(case):
    import torch

    import activis

    torch.set_num_threads(1)
    setup = case["build"]()
    labels = setup["y"].numpy()
    flipped, ambiguous = setup["flipped"], setup["ambiguous"]
    out = {"name": case["name"], "noise_rate": case["noise_rate"], "instances": len(labels),
           "flipped": int(flipped.sum()), "ambiguous": int(ambiguous.sum())}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        start = time.perf_counter()
        logits, probed, final = train(setup, run_dir)
        out["train_seconds"] = round(time.perf_counter() - start, 1)
        out["final_accuracy_on_clean_labels"] = round(float((final == setup["clean_y"]).mean()), 4)
        ref = reference_map(logits, labels)
        refs = {"data_map": ref, "run.data_map": reference_map(probed, labels),
                "run.data_map(source='training')": ref}
        out["reference_scores"] = scores_of(ref, flipped, ambiguous)
        out["reference_scores_probe"] = scores_of(refs["run.data_map"], flipped, ambiguous)
        routes = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                presentations = activis.read_dynamics(os.path.join(run_dir, "dynamics")).presentations()
                routes["data_map"] = activis.data_map(presentations, labels)
            except Exception as e:  # noqa: BLE001 - recorded
                out["data_map"] = {"error": _error(e)}
            try:
                routes["run.data_map"] = activis.open_run(run_dir).data_map()
            except Exception as e:  # noqa: BLE001
                out["run.data_map"] = {"error": _error(e)}
            try:  # not in the README: named by an error message of activis when there is no probe store
                routes["run.data_map(source='training')"] = activis.open_run(run_dir).data_map(source="training")
            except Exception as e:  # noqa: BLE001
                out["run.data_map(source='training')"] = {"error": _error(e)}
        out["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught})
        for route, dm in routes.items():
            try:
                out[route] = agreement(dm, refs[route])
            except Exception as e:  # noqa: BLE001 - a map without the documented columns
                out[route] = {"error": _error(e)}
        first = routes.get("data_map", routes.get("run.data_map"))
        if first is not None:
            try:
                out["scores"] = scores_of(first, flipped, ambiguous)
            except Exception as e:  # noqa: BLE001
                out["scores"] = {"error": _error(e)}
    parts = [out.get(r, {}) for r in ROUTES]
    if any("error" in p for p in parts):
        out["outcome"] = "error"
    else:
        out["outcome"] = "matches" if all(p.get("matches") for p in parts) else "differs"
    return out


def summarise(results):
    lines = []
    for r in results:
        s = r.get("scores", {})
        h = s.get("hard_to_learn_vs_flipped", {})
        a = s.get("ambiguous_region_vs_ambiguous", {})
        lines.append(f"{r['outcome']:8} {r['name']:34} flip {r['noise_rate']:.2f} | hard-to-learn P "
                     f"{h.get('precision')} R {h.get('recall')} | AUC(-conf, flipped) "
                     f"{s.get('auc_low_confidence_flipped')} | ambiguous P {a.get('precision')} R {a.get('recall')} "
                     f"AUC(var) {s.get('auc_variability_ambiguous')} | vs reference: "
                     f"{r.get('data_map', {}).get('max_diff_confidence', r.get('data_map'))}")
    tally = {}
    for r in results:
        tally[r["outcome"]] = tally.get(r["outcome"], 0) + 1
    lines.append(f"{len(results)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default=None)
    parser.add_argument("--out", default="datamap_results.jsonl")
    parser.add_argument("-k", default="")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    sys.path.insert(0, HERE)
    import cases_datamap

    results = []
    for case in cases_datamap.CASES:
        if args.k not in case["name"]:
            continue
        try:
            result = run_case(case)
        except Exception as e:  # noqa: BLE001 - the training itself (plain torch) or the recorder failed
            result = {"name": case["name"], "noise_rate": case["noise_rate"], "outcome": "error",
                      "error": _error(e)}
        results.append(result)
        print(json.dumps(result)[:400], flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    print(summarise(results))


if __name__ == "__main__":
    main()
