"""Runs every fuzz case in its own process with a timeout and prints a tally.

    python run_fuzz.py [--tree /path/to/activis/checkout] [--timeout 120] [--jobs 2] [-k substring]

Cases run one after another in `jobs` worker processes (a hung case's worker is killed and replaced).

Outcomes: clear error (an activis error naming the problem), unclear error (an activis error that does not name
it), handled (the check holds), refused (an activis error where handling was expected), raw error (an error from
numpy/torch/pandas/builtins, not activis), silently wrong (no error, wrong result), hang (timeout)."""

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))


def _mentions_ok(message, mentions):
    """Every mention group ("a|b": either) is in the message; case and _ versus space do not matter."""
    def norm(text):
        return text.lower().replace("_", " ")
    text = norm(message)
    return all(any(norm(alt) in text for alt in group.split("|")) for group in mentions)


def run_one(name):
    sys.path.insert(0, HERE)
    import cases_fuzz

    case = next(c for c in cases_fuzz.CASES if c["name"] == name)
    with tempfile.TemporaryDirectory() as tmp:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = case["call"](tmp)
                error = None
            except BaseException as e:  # noqa: BLE001 - classify everything
                result, error = None, e
            if error is not None:
                module = type(error).__module__ or ""
                message = f"{type(error).__name__}: {error}"
                if not module.startswith("activis"):
                    tb = traceback.extract_tb(error.__traceback__)
                    where = next((f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(tb)
                                  if "activis" in f.filename), "")
                    return "raw error", f"{module}.{message[:200]} at {where}"
                clear = _mentions_ok(str(error), case["mentions"])
                if case["expect"] == "error" or case["error_ok"]:
                    return ("clear error" if clear else "unclear error"), message[:200]
                return "refused", message[:200]
            if case["expect"] == "error":
                return "silently wrong", f"returned {type(result).__name__} without an error"
            try:
                ok = bool(case["check"](result, caught))
            except BaseException as e:  # noqa: BLE001
                module = type(e).__module__ or ""
                if module.startswith("activis"):
                    return "refused", f"check raised {type(e).__name__}: {str(e)[:160]}"
                return "raw error", f"check raised {module}.{type(e).__name__}: {str(e)[:160]}"
            return ("handled" if ok else "silently wrong"), f"{len(caught)} warnings"


class Worker:
    """One python process that runs cases one after another (imports are slow on a loaded machine); a case that
    does not answer within the timeout is a hang: the process is killed and a fresh one takes the next case."""

    def __init__(self, env, timeout, script=__file__):
        self.env, self.timeout, self.proc, self.script = env, timeout, None, script

    def _start(self):
        self.proc = subprocess.Popen([sys.executable, self.script, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env,
                                     cwd=tempfile.gettempdir())
        self.answers = queue.Queue()
        proc, answers = self.proc, self.answers

        def read():
            for line in proc.stdout:
                if line.startswith("FUZZ-RESULT "):
                    answers.put(json.loads(line[len("FUZZ-RESULT "):]))
            answers.put(None)
        threading.Thread(target=read, daemon=True).start()

    def run(self, name, first):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.answers.get(timeout=self.timeout + (120 if first else 0))  # the first case imports
        except queue.Empty:
            self.proc.kill()
            self.proc = None
            return "hang", f"no answer in {self.timeout:.0f} s"
        if answer is None:
            code = self.proc.wait()
            self.proc = None
            return "raw error", f"the process died (rc {code})"
        return answer

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def serve(run=None):
    """Answers case names read from stdin, one result line each (`run(name)` -> a JSON-able value)."""
    for line in sys.stdin:
        print("FUZZ-RESULT " + json.dumps((run or run_one)(line.strip())), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default=None, help="activis checkout to put first on PYTHONPATH")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("-k", default="")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve()
    sys.path.insert(0, HERE)
    import cases_fuzz

    names = [c["name"] for c in cases_fuzz.CASES if args.k in c["name"]]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if args.tree:
        env["PYTHONPATH"] = os.pathsep.join([args.tree, env.get("PYTHONPATH", "")])
    todo = queue.Queue()
    for i, name in enumerate(names):
        todo.put((i, name))
    results = {}

    def work():
        worker, first = Worker(env, args.timeout), True
        while True:
            try:
                i, name = todo.get_nowait()
            except queue.Empty:
                break
            outcome, detail = worker.run(name, first)
            first = worker.proc is None
            results[i] = (name, outcome, detail)
            print(f"{outcome:15} {name:48} {detail}", flush=True)
        worker.close()

    threads = [threading.Thread(target=work) for _ in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally = Counter(outcome for _, outcome, _ in results.values())
    print()
    order = ["clear error", "handled", "unclear error", "refused", "raw error", "silently wrong", "hang"]
    print(f"{len(names)} cases: " + ", ".join(f"{k} {tally[k]}" for k in order))


if __name__ == "__main__":
    main()
