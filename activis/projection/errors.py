"""What a projection raises."""

class ProjectionError(RuntimeError):
    """A projection that could not be computed; the message says why."""


class ProjectionCancelled(ProjectionError):
    """The job was cancelled (for example superseded by a newer request) before it finished."""


class _Cancelled(Exception):
    pass
