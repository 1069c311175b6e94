"""The training doctor on planted bugs: recall, false alarms, checkup time, and the cost of watching a run.

    python benchmarks/bench_doctor.py [--seeds 1] [--first-seed 0] [--rounds 40] [--threads 1] [--skip-planted]

Set-ups: tests/doctor_cases.py, one planted bug each (MLP, CNN, GRU/LSTM on scikit-learn's bundled
data or generated data; every before-training check has at least one), each with a healthy twin
identical but for the bug, plus standard healthy recipes. A bug counts as found when the full
checkup reports the case's check at the case's place (the node, module, parameter, or data /
loader / loss / optimizer). A false alarm is an error or warning on a healthy set-up (notes are
counted apart). Then the economy cockpit's step on bench_cockpit's MLP, with and without
``doctor=True``, alternating so that a shared machine's load hits both alike (ratio of medians).
Targets: recall >= 95 %, false alarms <= 5 %, checkup <= 30 s, watching <= 10 % on the economy step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).parent))

from bench_cockpit import CONFIGS, Runner, digits_28, mlp  # noqa: E402
from doctor_cases import CASES, HEALTHY  # noqa: E402

from activis.doctor import checkup  # noqa: E402

BROKEN: list[tuple[str, str]] = []  # checks that could not run (an exception, not a reason to skip)


def timed_checkup(setup: dict):
    start = time.perf_counter()
    report = checkup(**setup)
    BROKEN.extend((c, r) for c, r in report.skipped.items() if r.startswith("could not run"))
    return report, time.perf_counter() - start


def planted(seeds: int, first: int = 0) -> None:
    found, missed, alarms, notes, healthy_runs, times = 0, [], [], 0, 0, []
    for seed in range(first, first + seeds):
        for case in CASES:
            report, seconds = timed_checkup(case.build(bug=True, seed=seed))
            times.append((seconds, f"{case.name} (bug)"))
            if case.found(report):
                found += 1
            else:
                missed.append((case.name, seed, [(f.check, f.where or f.place) for f in report.findings]))
            twin, seconds = timed_checkup(case.build(bug=False, seed=seed))
            times.append((seconds, f"{case.name} (twin)"))
            healthy_runs += 1
            loud = [f for f in twin.findings if f.severity != "note"]
            notes += len(twin.findings) - len(loud)
            if loud:
                alarms.append((f"twin of {case.name}", seed, [(f.check, f.where or f.place) for f in loud]))
            print(f"  seed {seed}  {case.arch:3s}  {case.name:40s} {'found' if case.found(report) else 'MISSED':6s}"
                  f"  twin {'silent' if not loud else 'ALARM'}  {times[-2][0]:5.1f} s / {seconds:5.1f} s", flush=True)
        for name, make in HEALTHY.items():
            torch.manual_seed(seed)
            report, seconds = timed_checkup(make(seed))
            times.append((seconds, name))
            healthy_runs += 1
            loud = [f for f in report.findings if f.severity != "note"]
            notes += len(report.findings) - len(loud)
            if loud:
                alarms.append((name, seed, [(f.check, f.where or f.place) for f in loud]))
            print(f"  seed {seed}  healthy  {name:40s} {'ALARM' if loud else 'silent'}  {seconds:5.1f} s", flush=True)
    bugs = len(CASES) * seeds
    covered = sorted({c.check for c in CASES})
    print(f"\nplanted bugs: {len(CASES)} set-ups x {seeds} seed(s) = {bugs}, covering {len(covered)} checks; "
          f"healthy: {healthy_runs} runs ({len(CASES)} twins + {len(HEALTHY)} recipes per seed)")
    print(f"recall (right check, right place): {found}/{bugs} = {found / bugs:.1%}   (target >= 95 %)")
    print(f"false alarms (errors/warnings on healthy runs): {len(alarms)}/{healthy_runs} = "
          f"{len(alarms) / healthy_runs:.1%}   (target <= 5 %); notes on healthy runs: {notes}")
    seconds = sorted(times)
    print(f"checkup time per set-up: median {statistics.median(s for s, _ in seconds):.2f} s, "
          f"max {seconds[-1][0]:.2f} s ({seconds[-1][1]})   (target <= 30 s)")
    print(f"checks that could not run (broken, not skipped for a reason): {len(BROKEN)}")
    for check, reason in BROKEN[:5]:
        print(f"  {check}: {reason}")
    for name, seed, got in missed:
        print(f"  missed: {name} (seed {seed}); found instead {got}")
    for name, seed, got in alarms:
        print(f"  false alarm: {name} (seed {seed}): {got}")


def watching_cost(rounds: int, warmup: int = 5) -> None:
    data = digits_28(8)
    quantities, options = CONFIGS["economy"]
    plain = Runner(mlp, data, (quantities, options))
    watched = Runner(mlp, data, (quantities, {**options, "doctor": True}))
    doctor, spent = watched.cockpit.doctor, []
    observe = doctor.observe

    def timed_observe(step, values):  # the watchers' own time (the ReLU hooks run inside the forward pass)
        start = time.perf_counter()
        observe(step, values)
        spent.append(time.perf_counter() - start)

    doctor.observe = timed_observe
    for _ in range(warmup):
        plain.step(), watched.step()
    a, b = [], []
    for _ in range(rounds):
        a.append(plain.step())
        b.append(watched.step())
    ratio = statistics.median(b) / statistics.median(a)
    own = sum(spent[-2 * rounds:]) / rounds  # observe runs twice a step: the step's readings, the previous step's
    print(f"\nwatching (doctor=True) on the economy cockpit, MLP 784-512-256-10, batch 128, {rounds} steps: "
          f"economy step {1e3 * statistics.median(a):.1f} ms, with the doctor {1e3 * statistics.median(b):.1f} ms: "
          f"{ratio - 1:+.1%}   (target <= 10 %); the watchers' own time {1e6 * own:.0f} us per step = "
          f"{own / statistics.median(a):.1%} of the economy step")
    plain.cockpit.close()
    watched.cockpit.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-planted", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    if not args.skip_planted:
        planted(args.seeds, args.first_seed)
    watching_cost(args.rounds)


if __name__ == "__main__":
    main()
