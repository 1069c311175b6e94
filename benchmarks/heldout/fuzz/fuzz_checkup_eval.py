"""Bad calls against checkup, evaluate and EvaluationPanel (issue #26), as a new user makes them."""

import os
import sys
from collections import OrderedDict

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_common import adam, case, mlp, scores_and_labels, warned_about, wine  # noqa: E402

import activis  # noqa: E402

CASES = []


def add(*args, **kwargs):
    def register(call):
        CASES.append(case(*args, **kwargs)(call))
        return call
    return register


def _checkup(**kwargs):
    X, y = wine()
    model = kwargs.pop("model", None) or mlp()
    return activis.checkup(model, kwargs.pop("data", (X, y)), kwargs.pop("loss_fn", nn.CrossEntropyLoss()),
                           kwargs.pop("optimizer", adam(model)), **kwargs)


@add("checkup_optimizer_string", "error", ["optimizer"])
def _(tmp):
    return _checkup(optimizer="sgd")


@add("checkup_batch_size_zero", "error", ["batch_size"])
def _(tmp):
    return _checkup(batch_size=0)


@add("checkup_steps_negative", "error", ["steps"])
def _(tmp):
    return _checkup(steps=-5)


@add("checkup_max_samples_one", "error", ["max_samples"])
def _(tmp):
    return _checkup(max_samples=1)


@add("checkup_threads_zero", "error", ["threads"])
def _(tmp):
    return _checkup(threads=0)


@add("checkup_unknown_check", "error", ["no_such_check"])
def _(tmp):
    return _checkup(checks=["no_such_check"])


@add("checkup_model_is_a_function", "error", ["model|module"])
def _(tmp):
    X, y = wine()
    return activis.checkup(lambda x: x, (X, y), nn.CrossEntropyLoss())


@add("checkup_data_none", "error", ["data"])
def _(tmp):
    return _checkup(data=None)


@add("checkup_loss_fn_string", "error", ["loss_fn"])
def _(tmp):
    return _checkup(loss_fn="cross_entropy")


@add("checkup_x_y_lengths_differ", "error", ["120", "100"])
def _(tmp):
    X, y = wine()
    return _checkup(data=(X, y[:100]))


@add("checkup_empty_data", "error", ["empty|0 rows|samples"])
def _(tmp):
    X, y = wine()
    return _checkup(data=(X[:0], y[:0]))


@add("checkup_model_cannot_run_on_data", "error", ["fc1"])
def _(tmp):
    X, y = wine()
    model = nn.Sequential(OrderedDict(fc1=nn.Linear(10, 32), act=nn.ReLU(), fc2=nn.Linear(32, 3)))  # data: 13
    return _checkup(model=model, data=(X, y))


class Raises(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(13, 3)

    def forward(self, x):
        raise RuntimeError("boom in forward")


@add("checkup_forward_raises", "error", ["boom"])
def _(tmp):
    return _checkup(model=Raises())


class ReturnsText(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(13, 3)

    def forward(self, x):
        return "logits"


@add("checkup_forward_returns_text", "error", ["str"])
def _(tmp):
    return _checkup(model=ReturnsText())


class ReturnsNone(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(13, 3)

    def forward(self, x):
        self.fc(x)


@add("checkup_forward_returns_none", "error", ["none"])
def _(tmp):
    return _checkup(model=ReturnsNone())


class DictOut(nn.Module):
    """Returns a constant 'aux' first and the real logits under 'logits'."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x):
        return {"aux": torch.zeros(len(x), 3), "logits": self.net(x)}


def _judged_on_logits(report, warnings):
    frame = report.to_dataframe()
    bad = frame[frame["severity"].isin(["error", "warning"])]
    return not set(bad["check"]) & {"input_dependence", "gradient_coverage"}


@add("checkup_dict_output_with_logits", "handled", check=_judged_on_logits)
def _(tmp):
    model = DictOut()
    X, y = wine()
    return activis.checkup(model, (X, y), lambda out, t: nn.functional.cross_entropy(out["logits"], t), adam(model))


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x):
        return self.net(x), torch.zeros(len(x), 5)


@add("checkup_tuple_output_loss_takes_first", "handled", check=_judged_on_logits, error_ok=True,
     mentions=["tuple"])
def _(tmp):
    model = TupleOut()
    X, y = wine()
    return activis.checkup(model, (X, y), lambda out, t: nn.functional.cross_entropy(out[0], t), adam(model))


def _not_clean(report, warnings):
    return not report.clean


@add("checkup_per_sample_loss", "handled", check=_not_clean, error_ok=True, mentions=["scalar"])
def _(tmp):
    return _checkup(loss_fn=nn.CrossEntropyLoss(reduction="none"))


class WithBN(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(13, 32)
        self.bn = nn.BatchNorm1d(32)
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x))))


def _unchanged(result, warnings):
    before, after, out_before, out_after, modes, rng = result
    same = all(torch.equal(before[k], after[k]) for k in before)
    return same and torch.equal(out_before, out_after) and modes and rng


@add("checkup_leaves_model_unchanged", "handled", check=_unchanged)
def _(tmp):
    X, y = wine()
    model = WithBN()
    model.train()
    model(X)  # running statistics away from their defaults, as after training
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        out_before = model(X)
    rng_before = torch.get_rng_state()
    activis.checkup(model, (X, y), nn.CrossEntropyLoss(), adam(model))
    rng_same = torch.equal(rng_before, torch.get_rng_state())
    modes = not model.training and all(not m.training for m in model.modules())
    with torch.no_grad():
        out_after = model(X)
    return before, model.state_dict(), out_before, out_after, modes, rng_same


@add("checkup_test_data_wrong_width", "error", ["test_data"])
def _(tmp):
    X, y = wine()
    return _checkup(test_data=(X[:, :5], y))


@add("checkup_labels_as_strings_array", "error", ["label|y must"])
def _(tmp):
    X, y = wine()
    return _checkup(data=(X.numpy(), np.array(["a", "b", "c"])[y.numpy()]))


# ---- evaluate -------------------------------------------------------------------------------------------------


def _nan_counted(k, n, correct_finite):
    def check(e, warnings):
        s = e.summary
        finite_keys = [key for key in s if "finite" in key.lower()]
        if finite_keys and any(s[key] == k for key in finite_keys):
            return True
        return s.get("n") == n and s.get("accuracy", 1.0) <= correct_finite / n + 1e-9
    return check


def _labels_scores_with(rows, value):
    labels, scores = scores_and_labels()
    scores = scores.copy()
    scores[rows] = value
    finite = np.isfinite(scores).all(1)
    correct = int(((scores.argmax(1) == labels) & finite).sum())
    return labels, scores, correct


_NAN_ROWS = np.arange(0, 40, 2)
_labels, _scores, _correct = _labels_scores_with(_NAN_ROWS, np.nan)


@add("evaluate_nan_scores_counted", "handled", check=_nan_counted(20, 200, _correct), error_ok=True,
     mentions=["nan"])
def _(tmp):
    labels, scores, _ = _labels_scores_with(_NAN_ROWS, np.nan)
    return activis.evaluate(labels=labels, scores=scores)


_labels_i, _scores_i, _correct_i = _labels_scores_with(np.arange(10), np.inf)


@add("evaluate_inf_scores_counted", "handled", check=_nan_counted(10, 200, _correct_i), error_ok=True,
     mentions=["inf"])
def _(tmp):
    labels, scores, _ = _labels_scores_with(np.arange(10), np.inf)
    return activis.evaluate(labels=labels, scores=scores)


@add("evaluate_binary_nan_scores_auc", "handled", error_ok=True, mentions=["nan"],
     check=lambda e, w: e.summary.get("n") == 100 or any("finite" in k for k in e.summary))
def _(tmp):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 100)
    p = np.clip(0.5 + 0.3 * (labels - 0.5) + 0.2 * rng.normal(size=100), 0, 1)
    p[:15] = np.nan
    return activis.evaluate(labels=labels, scores=p)


@add("evaluate_labels_scores_lengths_differ", "error", ["labels", "scores"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels[:150], scores=scores)


@add("evaluate_subset_mask_too_short", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, subset=np.ones(150, bool))


@add("evaluate_subset_mask_too_long", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, subset=np.ones(250, bool))


@add("evaluate_subset_index_out_of_range", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, subset=[1, 2, 500])


@add("evaluate_subset_negative_index", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, subset=[0, 1, -3])


@add("evaluate_subset_float_indices", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, subset=np.array([0.5, 1.7, 3.2]))


@add("evaluate_subset_empty", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, subset=np.zeros(200, bool))


@add("evaluate_duplicate_class_names", "error", ["class_names"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, class_names=["cat", "dog", "cat"])


@add("evaluate_class_names_wrong_count", "error", ["class_names"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, class_names=["cat", "dog"])


@add("evaluate_threshold_nan", "error", ["threshold"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, threshold=float("nan"), focus="1")


@add("evaluate_threshold_inf", "error", ["threshold"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, threshold=float("inf"), focus="1")


@add("evaluate_threshold_as_text", "handled", error_ok=True, mentions=["threshold"],
     check=lambda e, w: e.threshold == 0.5)
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, threshold="0.5", focus="1")


@add("evaluate_unknown_focus", "error", ["zebra"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, threshold=0.3, focus="zebra")


@add("evaluate_label_beyond_score_columns", "error", ["label"])
def _(tmp):
    labels, scores = scores_and_labels()
    labels = labels.copy()
    labels[5] = 7
    return activis.evaluate(labels=labels, scores=scores)


@add("evaluate_negative_label", "handled", error_ok=True, mentions=["label"],
     check=lambda e, w: e.summary["n"] == 199 and warned_about(w, "label"))
def _(tmp):
    labels, scores = scores_and_labels()
    labels = labels.copy()
    labels[3] = -1
    return activis.evaluate(labels=labels, scores=scores)


@add("evaluate_n_bins_zero", "error", ["n_bins"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, n_bins=0)


@add("evaluate_bin_strategy_unknown", "error", ["bin_strategy"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores, bin_strategy="log")


@add("evaluate_empty", "error", ["empty|nothing to evaluate|no instance"])
def _(tmp):
    return activis.evaluate(labels=np.array([], int), scores=np.zeros((0, 3)))


@add("evaluate_scores_3d", "error", ["scores"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores[:, :, None])


@add("evaluate_roc_unknown_class", "error", ["zebra"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores).roc("zebra")


@add("evaluate_intervals_zero_resamples", "error", ["n_resamples"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.evaluate(labels=labels, scores=scores).intervals(n_resamples=0)


@add("evaluation_panel_nan_scores", "handled", check=lambda panel, w: panel is not None, error_ok=True,
     mentions=["nan"])
def _(tmp):
    labels, scores, _ = _labels_scores_with(_NAN_ROWS, np.nan)
    return activis.EvaluationPanel(labels=labels, scores=scores)


@add("evaluation_panel_threshold_nan", "error", ["threshold"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.EvaluationPanel(labels=labels, scores=scores, threshold=float("nan"))


@add("evaluation_panel_duplicate_class_names", "error", ["class_names"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.EvaluationPanel(labels=labels, scores=scores, class_names=["a", "a", "b"])


@add("evaluation_panel_subset_wrong_length", "error", ["subset"])
def _(tmp):
    labels, scores = scores_and_labels()
    return activis.EvaluationPanel(labels=labels, scores=scores, subset=np.ones(10, bool))


@add("evaluation_panel_set_threshold_nan_later", "error", ["threshold"])
def _(tmp):
    labels, scores = scores_and_labels()
    panel = activis.EvaluationPanel(labels=labels, scores=scores)
    panel.threshold = float("nan")
    return panel
