"""The one error class of slice discovery, and its one warning class."""


class SliceError(ValueError):
    """Slice discovery cannot run as asked: empty store, no labels, unknown layer, column or metric."""


class SliceWarning(UserWarning):
    """Part of the search was left out (a column that cannot be cut into predicates), with the reason."""
