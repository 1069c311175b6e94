"""How a row of the activation matrix names what it shows: the one spelling of its row keys.

``"subset:<name>"`` is a subset's mean, ``"instance:<index>"`` one instance; an explorer adds the
brushed instances as `BRUSH` and a hovered instance as `HOVER`. Any other key names a row of
instances given by `ActivationMatrix.add_rows_from_indices`.
"""

from __future__ import annotations

SUBSET_PREFIX = "subset:"
INSTANCE_PREFIX = "instance:"
BRUSH = "selection"
HOVER = "hover"


def subset_row(name: str) -> str:
    return SUBSET_PREFIX + name


def instance_row(index: int) -> str:
    return INSTANCE_PREFIX + str(int(index))


def subset_of(key: str) -> str | None:
    """The subset a row key shows, or None."""
    return key[len(SUBSET_PREFIX):] if key.startswith(SUBSET_PREFIX) else None


def instance_of(key: str) -> int | None:
    """The instance a row key shows, or None (also for a malformed instance key)."""
    text = key[len(INSTANCE_PREFIX):] if key.startswith(INSTANCE_PREFIX) else ""
    return int(text) if text.isdigit() else None


def instances_in(keys) -> set[int]:
    """The instances shown as rows among ``keys``."""
    return {i for i in map(instance_of, keys or []) if i is not None}


def is_reserved(key: str) -> bool:
    """Whether a key belongs to the subset or instance rows (a custom row may not use it)."""
    return key.startswith((SUBSET_PREFIX, INSTANCE_PREFIX))
