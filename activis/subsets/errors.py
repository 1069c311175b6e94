"""The one error class of subsets."""


class SubsetError(ValueError):
    """A subset that cannot be defined or evaluated: bad expression, unknown column, bad indices."""
