"""What a projection raises."""

class ProjectionError(RuntimeError, ValueError, TypeError, IndexError):
    """A projection that could not be asked for or computed; the message says why and what is valid.

    Also a ValueError, TypeError and IndexError (a bad method, parameter or instance set), so code
    that caught those before still does.
    """


class ProjectionCancelled(ProjectionError):
    """The job was cancelled (for example superseded by a newer request) before it finished."""


class _Cancelled(Exception):
    pass
