"""The before-training checks, one class per check (see `BEFORE_TRAINING` for the order they run in)."""

from .base import Check, Skip
from .data import BatchLabels, BatchWeights, ConflictingDuplicates, DataOrder, InputScale, TrainTestOverlap
from .dataset import BatchDependence, BatchNormBatchOfOne, BlankInputs, Leakage
from .flow import GradientCoverage, InputDependence, Randomness
from .labels import LabelsFitLoss, TargetScale
from .learning import LabelCoupling, OverfitBatch
from .numerics import DeadReLU, InitScale, NonFinite, Saturation, UnstableMath
from .optim import OptimizerSettings
from .setup import DoubleSoftmax, LossShapes, LossSign, OptimizerAttached

# the learning checks train copies of the model: they run last, and only once the structural checks found no
# error (a loss or model bug would read as "cannot learn" or "labels decoupled")
LEARNING = [OverfitBatch, LabelCoupling]
# cheap ones first
BEFORE_TRAINING = [
    NonFinite, InputScale, TargetScale, BlankInputs, Leakage, ConflictingDuplicates, TrainTestOverlap, BatchLabels,
    BatchWeights, DataOrder, BatchNormBatchOfOne, OptimizerAttached, OptimizerSettings, LossShapes, LabelsFitLoss,
    LossSign, DoubleSoftmax, InputDependence, BatchDependence, GradientCoverage, UnstableMath, InitScale,
    Saturation, DeadReLU, Randomness, *LEARNING,
]
CHECKS = {c.id: c for c in BEFORE_TRAINING}

__all__ = ["BEFORE_TRAINING", "CHECKS", "LEARNING", "Check", "Skip", *sorted(c.__name__ for c in BEFORE_TRAINING)]
