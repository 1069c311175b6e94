"""The second held-out fuzz set: every case of fuzz_runs.py and fuzz_dynamics_views.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_dynamics_views  # noqa: E402
import fuzz_runs  # noqa: E402

CASES = fuzz_runs.CASES + fuzz_dynamics_views.CASES
assert len({c["name"] for c in CASES}) == len(CASES)
