"""Diagnoses, not symptoms: findings that share a cause become one diagnosis, ranked, never contradicting.

Every finding names a cause (`CAUSES`). Findings with the same cause merge into one `Diagnosis`
(the most severe, earliest one leads; the others are its symptoms). A cause can also *explain*
others (`EXPLAINS`): a learning rate too high explains a plateau read as "too low", a loss that is
not a scalar explains "cannot overfit one batch", a learning-rate spike explains the divergence
after it. Explained findings join the explaining diagnosis as symptoms, so one report never says
"lower the learning rate" and "raise it", and never blames the data for a model or loss bug.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .findings import SEVERITIES, Finding

# cause -> the title of its diagnosis (what is wrong, not what was seen)
CAUSES = {
    "data_model_mismatch": "The model cannot take this data",
    "labels_for_loss": "Labels do not fit the loss",
    "loss_function": "The loss function is wrong",
    "model_output": "The model's output cannot be used",
    "gradient_cut": "The gradient is cut",
    "information_lost": "The output ignores the input",
    "backward": "The backward pass fails",
    "output_activation": "Output activation applied twice",
    "numerical": "A NaN/Inf is produced",
    "optimizer_setup": "The optimizer is not set up for this model",
    "lr_spike": "Learning-rate spike",
    "scheduler_per_batch": "Scheduler stepped every batch",
    "missing_zero_grad": "Gradients are never zeroed",
    "missing_optimizer_step": "The optimizer never steps",
    "clipping": "Gradient clipping swallows the updates",
    "frozen_layer": "A layer stopped training mid-run",
    "labels_corrupted": "Labels corrupted during training",
    "learning_rate_too_high": "Learning rate too high",
    "learning_rate_too_low": "Learning rate too low",
    "weight_decay": "Weight decay far too large",
    "momentum": "Momentum out of range",
    "input_scale": "Unscaled inputs",
    "target_scale": "Unscaled regression targets",
    "leakage": "A feature leaks the label",
    "train_test_overlap": "Training and test sets overlap",
    "batchnorm_batch_of_one": "BatchNorm gets batches of one",
    "blank_inputs": "Blank inputs",
    "batch_dependence": "A sample's output depends on its batch",
    "initialisation": "Initialisation scale",
    "dead_units": "Dead ReLUs",
    "saturation": "Saturated activations",
    "randomness": "Randomness left on",
    "data_order": "Unshuffled data",
    "labels_decoupled": "Labels decoupled from inputs",
    "capacity": "The model cannot fit the data",
    "vanishing_gradients": "Vanishing gradients",
    "conflicting_labels": "Duplicate inputs with conflicting labels",
    "sample_weights": "Zero sample weights",
}

# the structural causes: while one of them stands, the learning checks' results are its symptoms
STRUCTURAL = {"information_lost", "data_model_mismatch", "labels_for_loss", "loss_function", "model_output",
              "gradient_cut", "backward", "output_activation", "numerical", "optimizer_setup", "input_scale",
              "randomness", "batch_dependence", "initialisation", "dead_units", "saturation", "missing_zero_grad",
              "missing_optimizer_step", "learning_rate_too_low", "learning_rate_too_high", "clipping",
              "weight_decay", "momentum", "scheduler_per_batch"}
_LEARNING = {"capacity", "labels_decoupled"}
_LR_SYMPTOMS = {"learning_rate_too_high", "learning_rate_too_low", "numerical", "vanishing_gradients", "dead_units"}
# causes that are what a specific fault looks like from far away: a specific cause found within a few steps wins
_GENERIC = {"learning_rate_too_high", "learning_rate_too_low", "dead_units", "vanishing_gradients", "capacity",
            "labels_decoupled"}
EXPLAINS = {
    **{c: set(_LEARNING) for c in STRUCTURAL},
    "learning_rate_too_high": _LEARNING | {"learning_rate_too_low", "vanishing_gradients", "numerical",
                                           "labels_corrupted", "dead_units"},
    "lr_spike": _LEARNING | _LR_SYMPTOMS | {"labels_corrupted"},
    "scheduler_per_batch": _LEARNING | {"learning_rate_too_low"},
    "missing_zero_grad": _LEARNING | _LR_SYMPTOMS | {"labels_corrupted"},
    "missing_optimizer_step": _LEARNING | {"learning_rate_too_low", "frozen_layer"},
    "clipping": _LEARNING | {"learning_rate_too_low"},
    "labels_corrupted": _LEARNING | {"learning_rate_too_high", "learning_rate_too_low", "dead_units"},
    "frozen_layer": _LEARNING | {"learning_rate_too_low"},
    "weight_decay": _LEARNING | {"learning_rate_too_low"},
    "input_scale": _LEARNING | {"initialisation", "saturation", "dead_units"},
    "numerical": _LEARNING | {"learning_rate_too_high", "vanishing_gradients", "loss_function", "dead_units"},
    "loss_function": _LEARNING | {"learning_rate_too_high", "numerical"},
    "labels_for_loss": _LEARNING | {"loss_function", "numerical"},
}
# causes whose findings at different nodes are different problems (each its own diagnosis)
LOCAL = {"gradient_cut", "information_lost", "dead_units", "saturation", "randomness", "initialisation",
         "frozen_layer", "batch_dependence", "output_activation"}
_MID_RUN = {"lr_spike", "labels_corrupted", "frozen_layer", "scheduler_per_batch", "clipping"}
_SLACK = 20  # steps a symptom may be dated before its cause (windowed watchers date a window's start)
_RANK = {c: i for i, c in enumerate(CAUSES)}
_SEVERITY = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Diagnosis:
    """One cause with its symptoms: ``lead`` is the finding that names it best (place, step, advice)."""

    cause: str
    lead: Finding
    symptoms: list[Finding] = field(default_factory=list)

    @property
    def title(self) -> str:
        return CAUSES.get(self.cause, self.lead.title)

    @property
    def severity(self) -> str:
        return min((f.severity for f in self.findings), key=_SEVERITY.__getitem__)

    @property
    def step(self) -> int | None:
        steps = [f.step for f in self.findings if f.step is not None and f.cause == self.cause]
        return min(steps) if steps else self.lead.step

    @property
    def findings(self) -> list[Finding]:
        return [self.lead, *self.symptoms]

    def to_dict(self) -> dict:
        f = self.lead
        return {"cause": self.cause, "title": self.title, "severity": self.severity, "step": self.step,
                "place": f.place, "where": f.where, "node": f.node, "message": f.message, "change": f.change,
                "evidence": f.evidence_text(), "symptoms": [s.title + ": " + s.message for s in self.symptoms]}


def _key(f: Finding):
    """The lead of a diagnosis: the most severe, earliest finding, one that names a node before one that does not."""
    return (_SEVERITY[f.severity], f.step if f.step is not None else -1, f.node is None,
            _RANK.get(f.cause, len(_RANK)))


def diagnose(findings: list[Finding]) -> list[Diagnosis]:
    """Merge findings into diagnoses: by shared cause, then each explained cause into its explainer."""
    by_cause: dict[str, list[Finding]] = {}
    for f in sorted(findings, key=_key):
        by_cause.setdefault(f.cause, []).append(f)
    serious = {c for c, fs in by_cause.items() if any(f.severity != "note" for f in fs)}
    absorbed: dict[str, str] = {}
    for cause in sorted(serious, key=lambda c: (_first_step(by_cause[c]) + (3 if c in _GENERIC else 0),
                                                 _RANK.get(c, len(_RANK)))):
        if cause in absorbed:
            continue
        for other in EXPLAINS.get(cause, ()):
            if other in by_cause and other not in absorbed and other != cause and _timely(by_cause, cause, other):
                absorbed[other] = cause
    groups: dict[str, list[Diagnosis]] = {c: _split(c, fs) for c, fs in by_cause.items() if c not in absorbed}
    for other, cause in absorbed.items():
        while cause in absorbed:
            cause = absorbed[cause]
        groups[cause][0].symptoms.extend(by_cause[other])
    diagnoses = [d for ds in groups.values() for d in ds]
    return sorted(diagnoses, key=lambda d: (_SEVERITY[d.severity], _RANK.get(d.cause, len(_RANK)),
                                            d.step if d.step is not None else -1))


def _split(cause: str, findings: list[Finding]) -> list[Diagnosis]:
    """One diagnosis per place for the causes that are local (two cut gradients are two fixes), else one."""
    if cause not in LOCAL:
        return [Diagnosis(cause, findings[0], findings[1:])]
    by_node: dict = {}
    for f in findings:
        by_node.setdefault(f.node if f.node is not None else next(iter(by_node), None), []).append(f)
    return [Diagnosis(cause, fs[0], fs[1:]) for fs in by_node.values()]


def _first_step(findings: list[Finding]) -> int:
    """When a cause showed first (-1 before training): the earlier cause explains the later ones."""
    return min((f.step for f in findings if f.step is not None), default=-1)


def _timely(by_cause, cause: str, other: str) -> bool:
    """A cause found during training explains only symptoms that began with or after it (a spike at step 80
    does not explain a plateau from step 10)."""
    first = min((f.step for f in by_cause[cause] if f.step is not None), default=None)
    if first is None or cause not in _MID_RUN:
        return True
    return all(f.step is None or f.step >= first - _SLACK for f in by_cause[other])
