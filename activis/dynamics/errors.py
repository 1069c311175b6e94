"""The one error class of training dynamics."""


class DynamicsError(ValueError):
    """Input that training dynamics cannot be computed from: logits or labels of the wrong shape or
    range, non-finite values, arrays whose rows do not match, too few checkpoints, an unknown option."""
