"""Held-out fuzz cases for issue #26's surfaces, written from the README alone.

Each case: "name"; "call"(tmp_path) makes the bad call; "expect": "error" (an activis error whose message
contains every word of "mentions"; "a|b" accepts either) or "handled" ("check"(result, warnings) is True;
with "error_ok", a clear activis error naming "mentions" counts as right too)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_checkup_eval  # noqa: E402
import fuzz_logs_slices  # noqa: E402

CASES = fuzz_checkup_eval.CASES + fuzz_logs_slices.CASES
assert len({c["name"] for c in CASES}) == len(CASES)
