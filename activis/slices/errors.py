"""The one error class of slice discovery."""


class SliceError(ValueError):
    """Slice discovery cannot run as asked: empty store, no labels, unknown layer, column or metric."""
