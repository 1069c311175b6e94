"""Runs activis's doctor on every case of this folder and writes what it said, one JSON object a line.

    python run_doctor.py [--tree /path/to/activis] [--out results.jsonl] [--jobs 1] [--timeout 300] [-k name]
                         [--no-train] [--only healthy|checkup-bugs|faults] [--resume]

The second set's runner (`../doctor_v2/run_doctor.py`: the checkup with the set-up's `scheduler` and `test_data`, a
watched economy-cockpit run, worker processes with a per-case timeout, the summary that needs no cause mapping),
pointed at this folder: this folder's `smoke` is imported first, so the runner's `import smoke` finds it, and the
workers start this script."""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import smoke  # noqa: E402,F401  (this folder's, cached before the second set's runner imports "smoke")

_spec = importlib.util.spec_from_file_location("run_doctor_v2",
                                               os.path.join(os.path.dirname(HERE), "doctor_v2", "run_doctor.py"))
_v2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_v2)
_v2._v1.__file__ = os.path.abspath(__file__)  # workers start this script, not the second set's

if __name__ == "__main__":
    _v2._v1.main()
