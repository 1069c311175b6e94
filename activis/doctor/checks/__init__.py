"""The before-training checks, one class per check (see `BEFORE_TRAINING` for the order they run in)."""

from .base import Check, Skip
from .data import BatchLabels, BatchWeights, ConflictingDuplicates, DataOrder, InputScale, TrainTestOverlap
from .flow import GradientCoverage, InputDependence, Randomness
from .learning import LabelCoupling, OverfitBatch
from .numerics import DeadReLU, InitScale, NonFinite, Saturation, UnstableMath
from .setup import DoubleSoftmax, LossShapes, LossSign, OptimizerAttached

# cheap ones first; the two that train copies of the model last
BEFORE_TRAINING = [
    NonFinite, InputScale, ConflictingDuplicates, TrainTestOverlap, BatchLabels, BatchWeights, DataOrder,
    OptimizerAttached, LossShapes, LossSign, DoubleSoftmax, InputDependence, GradientCoverage, UnstableMath,
    InitScale, Saturation, DeadReLU, Randomness, OverfitBatch, LabelCoupling,
]
CHECKS = {c.id: c for c in BEFORE_TRAINING}

__all__ = ["BEFORE_TRAINING", "CHECKS", "Check", "Skip", *sorted(c.__name__ for c in BEFORE_TRAINING)]
