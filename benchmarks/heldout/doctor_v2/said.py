"""Prints run_doctor.py's summary of a results file and, per case, what the doctor said (errors and warnings as
check@place(severity, step)), for a reader who maps checks to causes by hand.

    python said.py results_main_before.jsonl > summary_main_before.txt"""

import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _summarise(results):
    spec = importlib.util.spec_from_file_location("run_doctor_v1", os.path.join(os.path.dirname(HERE), "doctor",
                                                                                "run_doctor.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.summarise(results)


def _finding(f):
    step = "" if f["step"] in (None, "None", "nan") else f",s{f['step']}"
    return f"{f['check']}@{f['place'] or f['where'] or f['node']}({f['severity'][0]}{step})"


def _said(part, name):
    if "error" in part:
        return f"{name} raised {part['error']['type']}: {part['error']['message'][:110]}"
    alarms = [_finding(f) for f in part["findings"] if f["severity"] in ("error", "warning")]
    if alarms:
        return f"{name} " + " ".join(alarms)
    if name == "checkup":
        return "checkup clean" if part.get("clean") else "checkup: no error or warning, not clean"
    return f"{name} -"


def main(path):
    results = [json.loads(line) for line in open(path) if line.strip()]
    print(_summarise([r for r in results if "kind" in r]))
    print()
    print("What the doctor said, per case (check@place(severity, step)); errors and warnings only:")
    for r in results:
        tag = f"{r['kind']}/{r['phase']}" + (f" {r['cause']}@{r['where']}" if r["cause"] else "")
        tag += f" onset {r['onset']}" if r.get("onset") else ""
        said = _said(r["checkup"], "checkup")
        if r.get("watched"):
            said += " | " + _said(r["watched"], "watched")
        print(f"  {r['name']} [{tag}]: {said}")
    seconds = sorted(r["checkup"]["seconds"] for r in results)
    print(f"checkup seconds: median {seconds[len(seconds) // 2]}, max {seconds[-1]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results_main_before.jsonl")
