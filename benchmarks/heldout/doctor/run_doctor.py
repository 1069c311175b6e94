"""Runs activis's doctor on every held-out case and writes what it said, one JSON object a line.

    python run_doctor.py [--tree /path/to/activis] [--out results.jsonl] [--jobs 1] [--timeout 300] [-k name]
                         [--no-train] [--only healthy|checkup-bugs|faults] [--resume]

For each case: the checkup of `build()` (clean?, findings: check, severity, place, step, title; or the error it
raised) and, for training faults and healthy recipes, the findings of a watched run (`train` with
`Cockpit(model, "economy", optimizer=opt, doctor=True)`). The summary needs no cause mapping:
  - healthy recipes with an error or warning (checkup / watched run): false alarms;
  - checkup-phase bugs whose checkup came back clean or raised a non-activis error: clean but broken;
  - training faults whose watched run found nothing at or after the onset.
Recall with the right cause and place needs the implementers' mapping from check ids to the cause vocabulary in
README.md; the JSON lines hold what it needs."""

import argparse
import json
import os
import queue
import sys
import threading
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fuzz"))
from run_fuzz import Worker, serve  # noqa: E402

COLUMNS = ["check", "severity", "place", "where", "node", "step", "title"]


def _findings(report):
    frame = report.to_dataframe()
    rows = []
    for _, row in frame.iterrows():
        rows.append({c: (None if c not in row or row[c] is None else str(row[c])) for c in COLUMNS})
    return rows


def _error(e):
    return {"type": type(e).__name__, "module": type(e).__module__, "message": str(e)[:300],
            "at": "".join(traceback.format_tb(e.__traceback__)[-1:])[-300:]}


def run_case(name, train=True):
    import smoke
    import torch

    import activis

    torch.set_num_threads(1)
    case = next(c for c in smoke.load_cases() if c["name"] == name)
    out = {"name": name, "kind": case["kind"], "phase": case["phase"], "cause": case["cause"],
           "where": case["where"], "onset": case.get("onset")}
    warnings.simplefilter("ignore")
    setup = case["build"]()
    start = time.perf_counter()
    try:
        kwargs = {"test_data": setup["test_data"]} if "test_data" in setup else {}
        report = activis.checkup(setup["model"], setup["data"], setup["loss_fn"], setup["optimizer"], **kwargs)
        out["checkup"] = {"clean": bool(report.clean), "findings": _findings(report)}
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        out["checkup"] = {"error": _error(e)}
    out["checkup"]["seconds"] = round(time.perf_counter() - start, 2)
    if train and case.get("train"):
        cockpits = []

        def factory(model, optimizer):
            cockpits.append(activis.Cockpit(model, "economy", optimizer=optimizer, doctor=True))
            return cockpits[-1]
        start = time.perf_counter()
        try:
            case["train"](factory, case["steps"])
            out["watched"] = {"findings": _findings(cockpits[0].doctor.report())}
        except Exception as e:  # noqa: BLE001
            out["watched"] = {"error": _error(e)}
        finally:
            for cockpit in cockpits:
                cockpit.close()
        out["watched"]["seconds"] = round(time.perf_counter() - start, 2)
    return out


def _alarm(part):
    return part is not None and ("error" in part or any(f["severity"] in ("error", "warning")
                                                        for f in part["findings"]))


def summarise(results):
    healthy = [r for r in results if r["kind"] == "healthy"]
    checkup_bugs = [r for r in results if r["kind"] == "bug" and r["phase"] == "checkup"]
    faults = [r for r in results if r["kind"] == "bug" and r["phase"] == "training"]
    fa_checkup = [r["name"] for r in healthy if _alarm(r.get("checkup"))]
    fa_watched = [r["name"] for r in healthy if _alarm(r.get("watched"))]
    broken = [r["name"] for r in checkup_bugs
              if r["checkup"].get("clean") or ("error" in r["checkup"]
                                               and not r["checkup"]["error"]["module"].startswith("activis"))]

    def found_after_onset(r):
        part = r.get("watched") or {}
        return any(f["severity"] in ("error", "warning") and f["step"] not in (None, "None", "nan")
                   and float(f["step"]) >= r["onset"] for f in part.get("findings", []))
    missed = [r["name"] for r in faults if "watched" in r and not found_after_onset(r)]
    lines = [f"healthy recipes with an error/warning at checkup: {len(fa_checkup)}/{len(healthy)} {fa_checkup}",
             f"healthy recipes with an error/warning in the watched run: {len(fa_watched)}/{len(healthy)} "
             f"{fa_watched}",
             f"checkup bugs clean or raising a raw error: {len(broken)}/{len(checkup_bugs)} {broken}",
             f"training faults with nothing found at or after onset: {len(missed)}/{len(faults)} {missed}"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default=None)
    parser.add_argument("--out", default="doctor_results.jsonl")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("-k", default="")
    parser.add_argument("--no-train", action="store_true")
    parser.add_argument("--only", choices=["healthy", "checkup-bugs", "faults"], default=None)
    parser.add_argument("--resume", action="store_true", help="skip the cases already in --out")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        train = os.environ.get("HELDOUT_NO_TRAIN") != "1"
        return serve(lambda name: run_case(name, train))
    import smoke

    groups = {"healthy": lambda c: c["kind"] == "healthy",
              "checkup-bugs": lambda c: c["kind"] == "bug" and c["phase"] == "checkup",
              "faults": lambda c: c["kind"] == "bug" and c["phase"] == "training"}
    done = set()
    if args.resume and os.path.exists(args.out):
        with open(args.out) as f:
            done = {json.loads(line)["name"] for line in f if line.strip()}
    names = [c["name"] for c in smoke.load_cases() if args.k in c["name"] and c["name"] not in done
             and (args.only is None or groups[args.only](c))]
    env = dict(os.environ, OMP_NUM_THREADS="1", HELDOUT_NO_TRAIN="1" if args.no_train else "0")
    if args.tree:
        env["PYTHONPATH"] = os.pathsep.join([args.tree, env.get("PYTHONPATH", "")])
    todo = queue.Queue()
    for name in names:
        todo.put(name)
    results, lock = [], threading.Lock()

    def work():
        worker, first = Worker(env, args.timeout, script=os.path.abspath(__file__)), True
        while True:
            try:
                name = todo.get_nowait()
            except queue.Empty:
                break
            answer = worker.run(name, first)
            first = worker.proc is None
            if not isinstance(answer, dict):
                answer = {"name": name, "runner": list(answer)}
            with lock:
                results.append(answer)
                with open(args.out, "a") as f:
                    f.write(json.dumps(answer) + "\n")
            print(json.dumps(answer)[:300], flush=True)
        worker.close()

    threads = [threading.Thread(target=work) for _ in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = [json.loads(line) for line in f if line.strip()]
    print(summarise([r for r in results if "kind" in r]))


if __name__ == "__main__":
    main()
