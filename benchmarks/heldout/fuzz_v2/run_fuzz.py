"""Runs every case of this folder in worker processes with a per-case timeout and prints a tally: the first set's
runner (`../fuzz/run_fuzz.py`) pointed at this folder's `cases_fuzz.py`.

    python run_fuzz.py [--tree /path/to/activis/checkout] [--timeout 120] [--jobs 2] [-k substring]

Outcomes: clear error (an activis error naming the problem), unclear error (an activis error that does not name
it), handled (the check holds), refused (an activis error where handling was expected), raw error (an error from
numpy/torch/pandas/builtins, not activis), silently wrong (no error, wrong result), hang (timeout)."""

import functools
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("run_fuzz_v1", os.path.join(os.path.dirname(HERE), "fuzz",
                                                                           "run_fuzz.py"))
_v1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_v1)
_v1.HERE = HERE                                                          # cases_fuzz is read from this folder
_v1.Worker = functools.partial(_v1.Worker, script=os.path.abspath(__file__))  # workers start this script

if __name__ == "__main__":
    _v1.main()
