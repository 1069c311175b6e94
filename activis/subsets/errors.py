"""The one error class of subsets."""


class SubsetError(ValueError, KeyError, TypeError):
    """A subset that cannot be defined or evaluated: bad expression, unknown name or column, bad indices.

    Also a KeyError (an unknown subset name, as a mapping raises) and a TypeError (a value of the
    wrong type), so code that caught those before still does.
    """

    __str__ = Exception.__str__  # the message as written, not quoted as KeyError would
