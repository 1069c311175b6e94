"""Runs activis's doctor on every case of this folder (the third set) and writes what it said, one JSON object a line.

    python run_doctor.py [--tree /path/to/activis] [--out results.jsonl] [--jobs 1] [--timeout 300] [-k name]
                         [--no-train] [--only healthy|checkup-bugs|faults] [--resume]

The first set's runner (`../doctor/run_doctor.py`: worker processes with a per-case timeout, the summary that needs
no cause mapping), pointed at this folder's cases; the checkup also gets the set-up's `scheduler` when it has one
(the README: "scheduler=... reads the schedule's first steps")."""

import importlib.util
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import smoke  # noqa: E402  (this folder's, cached before the first set's runner imports "smoke")

_spec = importlib.util.spec_from_file_location("run_doctor_v1",
                                               os.path.join(os.path.dirname(HERE), "doctor", "run_doctor.py"))
_v1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_v1)


def run_case(name, train=True):
    import torch

    import activis

    torch.set_num_threads(1)
    case = next(c for c in smoke.load_cases() if c["name"] == name)
    out = {"name": name, "kind": case["kind"], "phase": case["phase"], "cause": case["cause"],
           "where": case["where"], "where_also": case.get("where_also", []), "onset": case.get("onset")}
    warnings.simplefilter("ignore")
    setup = case["build"]()
    start = time.perf_counter()
    try:
        kwargs = {k: setup[k] for k in ("test_data", "scheduler") if k in setup}
        report = activis.checkup(setup["model"], setup["data"], setup["loss_fn"], setup["optimizer"], **kwargs)
        out["checkup"] = {"clean": bool(report.clean), "findings": _v1._findings(report)}
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        out["checkup"] = {"error": _v1._error(e)}
    out["checkup"]["seconds"] = round(time.perf_counter() - start, 2)
    if train and case.get("train"):
        cockpits = []

        def factory(model, optimizer):
            cockpits.append(activis.Cockpit(model, "economy", optimizer=optimizer, doctor=True))
            return cockpits[-1]
        start = time.perf_counter()
        try:
            case["train"](factory, case["steps"])
            out["watched"] = {"findings": _v1._findings(cockpits[0].doctor.report())}
        except Exception as e:  # noqa: BLE001
            out["watched"] = {"error": _v1._error(e)}
        finally:
            for cockpit in cockpits:
                cockpit.close()
        out["watched"]["seconds"] = round(time.perf_counter() - start, 2)
    return out


_v1.run_case = run_case                     # the worker's serve() calls it
_v1.__file__ = os.path.abspath(__file__)    # workers start this script, not the first set's

if __name__ == "__main__":
    _v1.main()
