"""The training doctor on planted bugs and healthy recipes: recall, false alarms, first producers, latency, cost.

    python benchmarks/bench_doctor.py [--seeds 1] [--first-seed 0] [--rounds 40] [--threads 1]
                                      [--skip-checkup] [--skip-watched] [--heldout DIR]

Before training (tests/doctor_cases.py): one planted bug per set-up (MLP, CNN, GRU/LSTM on scikit-learn's
bundled or generated data; every check has one), each with a healthy twin identical but for the bug,
plus healthy recipes. A bug counts as found when the checkup names the case's check at the case's place;
a set-up that cannot run counts through its SetupError's finding. During training (tests/doctor_runs.py):
faults switched on mid-run (zero_grad or optimizer.step dropped, a learning-rate spike, a layer frozen,
labels shuffled, clipping at 1e-5, log(0) in a forward, sqrt(0) in a backward, an epoch scheduler
stepped per batch; and a learning rate far too high from the start) on an MLP, a CNN, a GRU and a
transformer encoder at several onsets, against healthy recipes (warm-up from 0, cosine, one-cycle,
StepLR per epoch, label smoothing, class weights, clipping at 1.0, gradient accumulation, frozen and
zero-initialised layers, GPT-2-style init, batches of 8, a residual BatchNorm CNN, padded GRU text,
small BERT and GPT-2 configs). A fault counts as found when a diagnosis names its cause with a finding
at its place; latency is the diagnosis's step minus the onset; a false alarm is an error or warning on a
healthy run. Then a small BERT's checkup time, and the economy cockpit's step with and without the
doctor watching (alternating, ratio of medians). ``--heldout DIR`` runs someone else's cases (see
`heldout`). Targets: recall >= 95 %, false alarms <= 1 in 40, first producer >= 90 %, median latency
<= 10 steps, checkup <= 30 s, watching <= 10 %.
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
from doctor_runs import healthy_runs, planted_runs  # noqa: E402

import activis  # noqa: E402
from activis.doctor import Report, SetupError, checkup  # noqa: E402

BROKEN: list[tuple[str, str]] = []  # checks that could not run (an exception, not a reason to skip)


def timed_checkup(setup: dict):
    start = time.perf_counter()
    try:
        report = checkup(**setup)
    except SetupError as e:  # the set-up cannot run: the error's finding is the report
        report = Report([e.finding], ran=["runs"])
    BROKEN.extend(report.failed.items())
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


def watched(seeds: int, first: int = 0) -> None:
    """The watchers on real training loops: planted faults (half and more switched on mid-run) and healthy recipes."""
    seeds_ = range(first, first + seeds)
    found, missed, latencies, producers = 0, [], [], []
    runs = planted_runs(seeds_)
    for run in runs:
        start = time.perf_counter()
        report = run.run()
        ok, step = run.found(report)
        found += ok
        if ok:
            latencies.append(step - run.onset)
        else:
            missed.append((run.arch, run.name, [(d.cause, d.lead.where or d.lead.place, d.step)
                                                 for d in report.diagnoses]))
        if run.cause == "numerical":
            producers.append(ok)
        print(f"  {run.arch:3s} {run.name:42s} {'found' if ok else 'MISSED':6s} step {step} (onset {run.onset})"
              f"  {time.perf_counter() - start:5.1f} s", flush=True)
    alarms, healthy = [], healthy_runs(seeds_)
    for run in healthy:
        start = time.perf_counter()
        report = run.run()
        loud = [d for d in report.diagnoses if d.severity != "note"]
        if loud or report.failed:
            alarms.append((run.arch, run.name, [(d.cause, d.lead.where or d.lead.place, d.step) for d in loud],
                           report.failed))
        print(f"  healthy {run.arch[:24]:24s} {run.name[:40]:40s} {'ALARM' if loud else 'silent'}"
              f"  {time.perf_counter() - start:5.1f} s", flush=True)
    mid = sum(r.fault.mid_run for r in runs)
    print(f"\nwatched runs: {len(runs)} planted faults ({mid} switched on mid-run), {len(healthy)} healthy recipes")
    print(f"recall (right cause, right place): {found}/{len(runs)} = {found / len(runs):.1%}   (target >= 95 %)")
    print(f"false alarms on healthy runs: {len(alarms)}/{len(healthy)}   (target <= 1 in 40)")
    print(f"first producer of NaN/Inf named: {sum(producers)}/{len(producers)}   (target >= 90 %)")
    if latencies:
        print(f"latency (diagnosis step - onset): median {statistics.median(latencies):.0f}, "
              f"max {max(latencies)} steps   (target median <= 10)")
    for arch, name, got in missed:
        print(f"  missed: {arch} {name}; diagnosed instead {got}")
    for arch, name, got, failed in alarms:
        print(f"  false alarm: {arch} {name}: {got} {failed or ''}")


def transformer_checkup_time() -> None:
    """The full checkup of a small BERT (transformers, from a config: no download) on token ids."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    ids = torch.randint(0, 60, (400, 12))
    setup = {"model": model, "data": (ids, ids[:, 0] % 3), "loss_fn": torch.nn.CrossEntropyLoss(),
             "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3)}
    report, seconds = timed_checkup(setup)
    print(f"\ncheckup of a small BERT (2 layers, hidden 32, 400 samples of 12 tokens): {seconds:.1f} s   "
          f"(target <= 30 s); {report.summary()}")


def watching_cost(rounds: int, warmup: int = 5) -> None:
    data = digits_28(8)
    quantities, options = CONFIGS["economy"]
    plain = Runner(mlp, data, (quantities, options))
    watched = Runner(mlp, data, (quantities, options))
    doctor, spent = activis.watch(watched.cockpit), []
    on_log = doctor._on_log

    def timed_on_log(log):  # the watchers' own time (the ReLU and gradient hooks run inside the passes)
        start = time.perf_counter()
        on_log(log)
        spent.append(time.perf_counter() - start)

    watched.cockpit.log._listeners = [timed_on_log if c == on_log else c for c in watched.cockpit.log._listeners]
    for _ in range(warmup):
        plain.step(), watched.step()
    a, b = [], []
    for _ in range(rounds):
        a.append(plain.step())
        b.append(watched.step())
    ratio = statistics.median(b) / statistics.median(a)
    own = sum(spent[-2 * rounds:]) / rounds  # the log notifies twice a step: the step, the previous step's rest
    print(f"\nwatching (activis.watch) on the economy cockpit, MLP 784-512-256-10, batch 128, {rounds} steps: "
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
    parser.add_argument("--skip-checkup", action="store_true", help="skip the before-training set-ups")
    parser.add_argument("--skip-watched", action="store_true", help="skip the watched training runs")
    parser.add_argument("--heldout", help="a folder of held-out cases (python files with a CASES list)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    if args.heldout:
        heldout(args.heldout)
        return
    if not args.skip_checkup:
        planted(args.seeds, args.first_seed)
    if not args.skip_watched:
        watched(args.seeds, args.first_seed)
    transformer_checkup_time()
    watching_cost(args.rounds)


if __name__ == "__main__":
    main()
