"""Runs every case's build() (one forward, loss, backward on a batch) and train() with plain torch and a stand-in
cockpit, and prints what happened. No activis involved. The first set's smoke runner, pointed at this folder.

    python smoke.py [cases_x.py]"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_spec = importlib.util.spec_from_file_location("smoke_v1", os.path.join(os.path.dirname(HERE), "doctor", "smoke.py"))
_v1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_v1)
_v1.HERE = HERE  # load_cases reads the case files of this folder
StandInCockpit, first_batch, try_build, load_cases = _v1.StandInCockpit, _v1.first_batch, _v1.try_build, _v1.load_cases

if __name__ == "__main__":
    _v1.main()
