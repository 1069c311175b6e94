"""What a capture tells its user: a progress bar while it runs, and a warning of the values it could not keep.

Reporting is kept apart from the run so that the session reads as the steps of a capture; the
warning is computed from the finished store, so that a resumed capture reports every row.
"""

from __future__ import annotations

import warnings

from ..store import ActivationStore
from .group import _Group
from .options import NonFiniteWarning

UNDERFLOW_WARNING = 1e-3  # of a layer's values


def _progress_bar(enabled: bool, total, initial: int, group: _Group, what: str = "capture"):
    from tqdm.auto import tqdm

    desc = what if group.world_size == 1 else f"{what} [rank {group.rank}/{group.world_size}]"
    return tqdm(total=total, initial=initial, unit="inst", unit_scale=True, desc=desc, disable=not enabled,
                smoothing=0.1, dynamic_ncols=True)


def _warn_nonfinite(store: ActivationStore) -> None:
    """Warn of NaN, Inf and overflow wherever met; of underflow where it touches 0.1% of a layer's values
    or more (a few tiny values near zero are common and harmless; they are counted either way)."""
    counts = store.nonfinite_counts
    for name, c in counts.items():
        values = store.n_instances * (store.layer_spec(name).neurons if name in store.layers else 0)
        if c["underflow"] < UNDERFLOW_WARNING * values:
            c["underflow"] = 0
    bad = {name: c for name, c in counts.items() if any(c.values())}
    if not bad:
        return
    lines = []
    for name, c in bad.items():
        text = f"{name}: {c['nan']:,} NaN, {c['inf']:,} Inf"
        text += f", {c['overflow']:,} beyond float16 (saturated at ±65504)" if c["overflow"] else ""
        text += f", {c['underflow']:,} below float16's smallest normal (stored as 0 or subnormal)" \
            if c["underflow"] else ""
        lines.append(text)
    advice = " Capture with dtype='float32' to keep the large and the tiny values." \
        if any(c["overflow"] or c["underflow"] for c in bad.values()) else ""
    warnings.warn("Non-finite or overflowing activations in " + store.path.name + ": " + "; ".join(lines) +
                  ". The instances table's 'nonfinite' column says which instances." + advice,
                  NonFiniteWarning, stacklevel=4)

