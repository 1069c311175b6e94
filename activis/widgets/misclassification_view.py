"""MisclassificationView: why one instance was classified as it was, at one layer, as bars per neuron.

A thin view over `activis.analysis.explain_instance`: it holds which instance and which layer are
explained, and re-explains whenever either changes, so its heading and bars always say the same
thing as the other views (the layer they show, the instance pinned there). With an explorer's
`Selection`, the neurons it shows are written to ``selection.highlight_neurons`` so that the
activation matrix marks their columns, and a click on a bar picks that neuron everywhere.
"""

from __future__ import annotations

import numpy as np
import traitlets
from ipywidgets import widget_serialization

from ..analysis import AnalysisError, explain_instance
from ._arrays import array_serialization
from ._base import View, bundle, class_count
from .colours import palette
from .errors import ViewError, check_layer, check_same_instances, check_store
from .selection import MISCLASSIFICATION, Selection

MAX_NEURONS = 200  # bars beyond this stop being readable; the full ranking is `explanation.neurons`


class MisclassificationView(View):
    """The neurons that moved instance ``index`` from its true class toward another, at ``layer``.

    The compared class is the predicted one when the instance is misclassified, the runner-up when
    it is classified correctly (see `explain_instance`). Per neuron, of the ``top`` highest by score,
    three bars: ``score`` (the ranking), ``departure`` (standard deviations moved toward the compared
    class) and ``evidence`` (its term in the log-likelihood ratio of the two classes). ``index`` -1
    shows what to do instead of bars; a question the store cannot answer shows its reason.

    Linkable traits: ``index``, ``layer``, ``selected_neuron`` (a clicked bar, -1 for none).
    ``explanation`` is the last `InstanceExplanation` (None when nothing is explained).
    """

    _esm = bundle("misclassification_view")

    height = traitlets.Int(300).tag(sync=True)
    index = traitlets.Int(-1).tag(sync=True)
    layer = traitlets.Unicode("").tag(sync=True)
    top = traitlets.Int(12).tag(sync=True)

    # what the browser draws, derived here from the explanation (never edited there)
    facts = traitlets.Dict().tag(sync=True)  # heading: instance, classes, layer, summary numbers
    neuron_ids = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32, best score first
    scores = traitlets.Any(None).tag(sync=True, **array_serialization)  # float32, one per bar
    departures = traitlets.Any(None).tag(sync=True, **array_serialization)
    evidences = traitlets.Any(None).tag(sync=True, **array_serialization)
    status = traitlets.Unicode("").tag(sync=True)  # why nothing is explained (placeholder or error)

    selected_neuron = traitlets.Int(-1).tag(sync=True)
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, store, layer: str | None = None, *, index: int = -1, **kwargs):
        self._store = check_store("MisclassificationView", store)
        self._explanation = None
        self._explaining = False
        layers = list(store.layers)
        if not layers:
            raise ViewError(f"Store {store.path} holds no layers to explain.")
        kwargs.setdefault("colours", palette(class_count(store)))
        super().__init__(layer=layer if layer is not None else layers[-1], index=index, **kwargs)
        self.observe(self._refresh, names=["index", "layer", "top"])
        self.observe(self._share, names=["shared_selection"])
        self._refresh()

    @property
    def store(self):
        return self._store

    @property
    def explanation(self):
        """The `InstanceExplanation` shown (None when no instance is explained)."""
        return self._explanation

    def explain(self, index: int, layer: str | None = None):
        """Explain instance ``index`` (at ``layer``, default the current one); returns the explanation or None."""
        self._explaining = True  # one explanation for both changes, not one per trait
        try:
            if layer is not None:
                self.layer = layer
            self.index = int(index)
        finally:
            self._explaining = False
        self._refresh()
        return self._explanation

    def clear(self) -> None:
        self.index = -1

    def set_store(self, store) -> None:
        """Explain at another store of the same instances (a checkpoint: ``store.at(step)``)."""
        self._store = check_same_instances("MisclassificationView", self._store, store)
        self._refresh()

    # ------------------------------------------------------------------ validation
    @traitlets.validate("index")
    def _valid_index(self, proposal):
        index, n = int(proposal["value"]), self._store.n_instances
        if not -1 <= index < n:
            raise ViewError(f"Instance {index} is out of range: the store holds {n} instances "
                            f"(0..{n - 1}); -1 explains none.")
        return index

    @traitlets.validate("layer")
    def _valid_layer(self, proposal):
        return check_layer(self._store, proposal["value"])

    @traitlets.validate("top")
    def _valid_top(self, proposal):
        top = int(proposal["value"])
        if not 1 <= top <= MAX_NEURONS:
            raise ViewError(f"top must be between 1 and {MAX_NEURONS}, not {top}.")
        return top

    # ------------------------------------------------------------------ syncing
    def _refresh(self, _change=None) -> None:
        if self._explaining:
            return
        result, status = None, ""
        if self.index < 0:
            status = ("Pin an instance (click its square in the instance panel, or its point in the projection) "
                      "to see which neurons moved it toward the class it was mistaken for.")
        else:
            try:
                result = explain_instance(self._store, self.index, self.layer)
            except AnalysisError as exc:
                status = str(exc)
        self._explanation = result
        with self.hold_sync():
            self.status = status
            if result is None:
                self.facts = {}
                self.neuron_ids = self.scores = self.departures = self.evidences = None
            else:
                self._send_explanation(result)
        self._share()

    def _send_explanation(self, result) -> None:
        shown = result.neurons.head(self.top)
        summary = result.summary
        spec = self._store.layer_spec(result.layer)
        self.facts = {
            "index": result.index, "layer": result.layer, "correct": result.correct,
            "confidence": result.confidence, "true_class": result.true_class, "true_name": summary["true_name"],
            "pred_class": result.pred_class, "pred_name": summary["pred_name"],
            "compared_class": result.compared_class, "compared_name": summary["compared_name"],
            "neuron_kind": spec.neuron_kind, "neurons": summary["neurons"],
            "toward": summary["neurons_toward_compared"],
            "log_likelihood_ratio": summary["log_likelihood_ratio"], "message": result.message,
        }
        self.neuron_ids = shown.index.to_numpy(np.int32)
        self.scores = shown["score"].to_numpy(np.float32)
        self.departures = shown["departure"].to_numpy(np.float32)
        self.evidences = shown["evidence"].to_numpy(np.float32)

    def _share(self, _change=None) -> None:
        """Tell the other views which neurons are shown (the matrix marks their columns)."""
        selection = self.shared_selection
        if selection is None:
            return
        result = self._explanation
        if result is None:
            if selection.highlight_neurons_source == MISCLASSIFICATION:
                selection.set_neuron_highlight(None, "", MISCLASSIFICATION)
            return
        selection.set_neuron_highlight(self.neuron_ids, result.layer, MISCLASSIFICATION)

    def data(self):
        """The bars shown: one row per neuron (best score first) with its score, departure and evidence, and
        the instance, layer and classes they explain; empty (same columns) when no instance is explained."""
        import pandas as pd

        columns = ["instance", "layer", "true_class", "compared_class", "neuron", "score", "departure", "evidence"]
        result = self._explanation
        if result is None:
            return pd.DataFrame(columns=columns)
        bars = result.neurons.head(self.top)[["score", "departure", "evidence"]].rename_axis("neuron").reset_index()
        facts = {"instance": result.index, "layer": result.layer, "true_class": self.facts["true_name"],
                 "compared_class": self.facts["compared_name"]}
        return bars.assign(**facts)[columns]
