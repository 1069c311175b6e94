"""Bad calls against data_map / forgotten / prediction_changed, cka, aligned_projection, the Explorer over a run
(explorer.checkpoint, cockpit.step_range), save_html / save_png / chart() / data(), and evaluation's nonfinite=."""

import os

from fuzz_v2_common import adder, copy_run, explorer, logits, np, open_copy, scores_and_labels, store, warned_about

CASES = []
add = adder(CASES)


# ---------------------------------------------------------------- data_map and the subsets it makes

@add("data_map_of_one_checkpoint_as_2d", "error", ["logits|checkpoint|3-d|3d|dimension"])
def _(tmp):
    import activis
    z, y = logits()
    return activis.data_map(z[0], y)


@add("data_map_labels_one_short", "error", ["label", "50|49"])
def _(tmp):
    import activis
    z, y = logits()
    return activis.data_map(z, y[:-1])


@add("data_map_label_equal_to_class_count", "error", ["label", "3"])
def _(tmp):
    import activis
    z, y = logits()
    y = y.copy()
    y[0] = 3
    return activis.data_map(z, y)


@add("data_map_negative_label", "error", ["label"])
def _(tmp):
    import activis
    z, y = logits()
    y = y.copy()
    y[4] = -2
    return activis.data_map(z, y)


@add("data_map_nan_logits", "error", ["nan", "checkpoint"])
def _(tmp):
    import activis
    z, y = logits()
    z[2, 5, 1] = np.nan
    return activis.data_map(z, y)


@add("data_map_plus_inf_logits", "error", ["inf"])
def _(tmp):
    import activis
    z, y = logits()
    z[1, 3, 0] = np.inf
    return activis.data_map(z, y)


@add("data_map_minus_inf_masked_class", "handled", check=lambda r, w: bool(np.isfinite(r["confidence"]).all()))
def _(tmp):
    import activis
    z, y = logits()
    other = (y + 1) % 3
    z[:, np.arange(len(y)), other] = -np.inf  # a masked class: probability 0
    return activis.data_map(z, y)


@add("data_map_minus_inf_on_the_label", "handled",
     check=lambda r, w: bool(np.isfinite(r["confidence"]).all()) and float(r["confidence"].iloc[0]) < 1.0)
def _(tmp):
    import activis
    z, y = logits()
    z[0, 0, y[0]] = -np.inf  # the label's probability is 0 at one checkpoint
    return activis.data_map(z, y)


@add("data_map_ambiguous_above_negative", "error", ["ambiguous_above"])
def _(tmp):
    import activis
    z, y = logits()
    return activis.data_map(z, y, ambiguous_above=-0.1)


@add("data_map_easy_above_nan", "error", ["easy_above"])
def _(tmp):
    import activis
    z, y = logits()
    return activis.data_map(z, y, easy_above=float("nan"))


@add("data_map_checkpoints_of_different_sizes", "error", ["checkpoint|shape|rows|instances"])
def _(tmp):
    import activis
    z, y = logits()
    return activis.data_map([z[0], z[1][:-1], z[2]], y)


@add("data_map_no_checkpoint", "error", ["checkpoint|empty|logits"])
def _(tmp):
    import activis
    _, y = logits()
    return activis.data_map([], y)


@add("data_map_a_single_checkpoint", "handled", ["checkpoint"], error_ok=True,
     check=lambda r, w: bool((np.asarray(r["variability"]) == 0).all()))
def _(tmp):
    import activis
    z, y = logits()
    return activis.data_map(z[:1], y)


@add("forgotten_negative_count", "error", ["-1"])
def _(tmp):
    import activis
    from activis.dynamics import forgotten
    z, y = logits()
    return forgotten(activis.data_map(z, y), -1)


@add("forgotten_on_a_frame_that_is_no_data_map", "error", ["forgetting|data map|data_map"])
def _(tmp):
    import pandas as pd

    from activis.dynamics import forgotten
    return forgotten(pd.DataFrame({"confidence": [0.2, 0.9]}), 2)


@add("prediction_changed_checkpoint_out_of_range", "error", ["9|checkpoint"])
def _(tmp):
    from activis.dynamics import prediction_changed
    z, _ = logits()
    return prediction_changed(z, 0, 9)


# ---------------------------------------------------------------- cka

def _reps(n=60, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8))
    return x, np.tanh(x @ rng.normal(size=(8, 5)))


@add("cka_rows_differ", "error", ["60|59|rows|instances"])
def _(tmp):
    import activis
    x, h = _reps()
    return activis.cka(x, h[:-1])


@add("cka_one_dimensional", "error", ["2-d|2d|dimension|shape"])
def _(tmp):
    import activis
    x, h = _reps()
    return activis.cka(x[:, 0], h)


@add("cka_nan_in_a_representation", "error", ["nan|finite"])
def _(tmp):
    import activis
    x, h = _reps()
    x[3, 2] = np.nan
    return activis.cka(x, h)


@add("cka_unknown_kernel", "error", ["kernel", "linear", "rbf"])
def _(tmp):
    import activis
    x, h = _reps()
    return activis.cka(x, h, kernel="poly")


@add("cka_rbf_threshold_zero", "error", ["threshold"])
def _(tmp):
    import activis
    x, h = _reps()
    return activis.cka(x, h, kernel="rbf", threshold=0.0)


@add("cka_max_rows_zero", "error", ["max_rows"])
def _(tmp):
    import activis
    x, h = _reps()
    return activis.cka(x, h, kernel="rbf", max_rows=0)


@add("cka_debiased_on_three_rows", "error", ["4|rows|instances"])
def _(tmp):
    import activis
    x, h = _reps()
    return activis.cka(x[:3], h[:3], debiased=True)


@add("cka_constant_representation_is_zero", "handled", check=lambda r, w: float(r) == 0.0)
def _(tmp):
    import activis
    x, _ = _reps()
    return activis.cka(x, np.ones((60, 4)))


@add("cka_with_itself_is_one", "handled", check=lambda r, w: abs(float(r) - 1.0) < 1e-9)
def _(tmp):
    import activis
    x, _ = _reps()
    return activis.cka(x, x * 3.0 + 1.0)


# ---------------------------------------------------------------- aligned_projection

def _frames(k=3, n=80, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 12))
    return [base + 0.1 * t * rng.normal(size=(n, 12)) for t in range(k)]


@add("aligned_projection_no_frames", "error", ["frame|empty|checkpoint"])
def _(tmp):
    import activis
    return activis.aligned_projection([], random_state=0)


@add("aligned_projection_frames_of_different_rows", "error", ["rows|instances|80|79"])
def _(tmp):
    import activis
    f = _frames()
    return activis.aligned_projection([f[0], f[1][:-1], f[2]], random_state=0)


@add("aligned_projection_nan_in_a_frame", "error", ["nan|finite"])
def _(tmp):
    import activis
    f = _frames()
    f[1][4, 3] = np.nan
    return activis.aligned_projection(f, random_state=0)


@add("aligned_projection_one_dimensional_frame", "error", ["2-d|2d|dimension|shape"])
def _(tmp):
    import activis
    f = _frames()
    return activis.aligned_projection([f[0][:, 0], f[1][:, 0]], random_state=0)


@add("aligned_projection_random_state_text", "error", ["random_state"])
def _(tmp):
    import activis
    return activis.aligned_projection(_frames(), random_state="zero")


# ---------------------------------------------------------------- the Explorer over a run

@add("explorer_run_that_does_not_exist", "error", ["ghost|run"])
def _(tmp):
    import activis
    run = open_copy(tmp)
    return activis.Explorer(run.store, run=os.path.join(tmp, "ghost"), method="pca")


@add("explorer_checkpoint_not_among_the_steps", "error", ["7", "10"])
def _(tmp):
    ex = explorer(tmp)
    ex.checkpoint = 7


@add("explorer_checkpoint_as_text", "error", ["checkpoint"])
def _(tmp):
    ex = explorer(tmp)
    ex.checkpoint = "5"


def _kept(result, warnings):
    ex, before = result
    return ex.checkpoint == before


@add("explorer_refused_checkpoint_keeps_the_shown_one", "handled", check=_kept)
def _(tmp):
    ex = explorer(tmp)
    ex.checkpoint = 5
    try:
        ex.checkpoint = 7
    except Exception as e:  # noqa: BLE001 - the refusal is expected; what matters is what stays
        if not type(e).__module__.startswith("activis"):
            raise
    return ex, 5


@add("cockpit_step_range_reversed", "handled", ["step_range|range"], error_ok=True,
     check=lambda r, w: r.checkpoint == 10)
def _(tmp):
    ex = explorer(tmp)
    ex.checkpoint = 0
    ex.cockpit.step_range = [11, 0]
    return ex


@add("cockpit_step_range_one_value", "error", ["step_range|range|two"])
def _(tmp):
    ex = explorer(tmp)
    ex.cockpit.step_range = [5]


@add("cockpit_step_range_nan", "error", ["step_range|range|nan"])
def _(tmp):
    ex = explorer(tmp)
    ex.cockpit.step_range = [float("nan"), 5]


@add("cockpit_step_range_past_the_run", "handled", ["range|checkpoint"], error_ok=True,
     check=lambda r, w: r.checkpoint == 5)
def _(tmp):
    ex = explorer(tmp)
    ex.checkpoint = 5
    ex.cockpit.step_range = [100, 200]  # no checkpoint in it: nothing to move to
    return ex


# ---------------------------------------------------------------- save_html, save_png, chart(), data()

def _panel(tmp):
    import activis
    return activis.EvaluationPanel(store(tmp))


@add("save_html_into_a_missing_folder", "handled", ["no_such|folder|directory"], error_ok=True,
     check=lambda r, w: os.path.exists(r))
def _(tmp):
    import activis
    path = os.path.join(tmp, "no_such", "deeper", "report.html")
    activis.save_html(path, _panel(tmp))
    return path


@add("save_html_without_a_view", "error", ["view"])
def _(tmp):
    import activis
    return activis.save_html(os.path.join(tmp, "report.html"))


@add("save_html_of_text", "error", ["view|str"])
def _(tmp):
    import activis
    return activis.save_html(os.path.join(tmp, "report.html"), "matrix")


@add("save_html_onto_a_folder", "error", ["folder|directory|path"])
def _(tmp):
    import activis
    return activis.save_html(tmp, _panel(tmp))


@add("save_html_max_instances_zero", "error", ["max_instances"])
def _(tmp):
    import activis
    ex = activis.Explorer(store(tmp), method="pca")
    return activis.save_html(os.path.join(tmp, "x.html"), ex, max_instances=0)


def _title_is_text(result, warnings):
    return "<script>alert(1)</script>" not in result and "alert(1)" in result


@add("save_html_title_with_markup_stays_text", "handled", check=_title_is_text)
def _(tmp):
    import activis
    path = os.path.join(tmp, "r.html")
    activis.save_html(path, _panel(tmp), title="<script>alert(1)</script>")
    with open(path, encoding="utf-8") as f:
        return f.read()


@add("save_png_into_a_missing_folder", "error", ["no_such|folder|directory"])
def _(tmp):
    return _panel(tmp).save_png(os.path.join(tmp, "no_such", "x.png"))


@add("save_png_of_a_view_never_shown_returns", "handled", ["screen|display|shown|render|front"], error_ok=True,
     check=lambda r, w: r is not None)
def _(tmp):
    return _panel(tmp).save_png(os.path.join(tmp, "x.png"))  # no front-end here: it must not wait forever


@add("panel_chart_unknown_kind", "error", ["lift", "roc"])
def _(tmp):
    return _panel(tmp).chart("lift")


@add("panel_data_unknown_kind", "error", ["lift", "roc|confusion"])
def _(tmp):
    return _panel(tmp).data("lift")


@add("runs_panel_chart_unknown_series", "error", ["NoSuch", "Loss"])
def _(tmp):
    import activis
    return activis.RunsPanel(activis.compare([copy_run(tmp)])).chart(["NoSuch"])


# ---------------------------------------------------------------- evaluation: nonfinite=

def _nan_scores(k=10):
    labels, scores = scores_and_labels()
    scores = scores.copy()
    scores[:k] = np.nan
    return labels, scores


@add("evaluate_nonfinite_unknown_choice", "error", ["nonfinite", "wrong", "drop", "raise"])
def _(tmp):
    import activis
    labels, scores = _nan_scores()
    return activis.evaluate(labels=labels, scores=scores, nonfinite="ignore")


@add("evaluate_nonfinite_none", "error", ["nonfinite"])
def _(tmp):
    import activis
    labels, scores = _nan_scores()
    return activis.evaluate(labels=labels, scores=scores, nonfinite=None)


@add("evaluate_nonfinite_raise_on_nan", "error", ["nan|non-finite|nonfinite"])
def _(tmp):
    import activis
    labels, scores = _nan_scores()
    return activis.evaluate(labels=labels, scores=scores, nonfinite="raise")


def _wrong_counted(result, warnings):
    e, expected = result
    return (int(e.summary["nonfinite"]) == 10 and abs(float(e.summary["accuracy"]) - expected) < 1e-9
            and warned_about(warnings, "nan") | warned_about(warnings, "finite"))


@add("evaluate_nan_rows_count_as_wrong", "handled", check=_wrong_counted)
def _(tmp):
    import activis
    labels, scores = _nan_scores()
    correct = (scores[10:].argmax(1) == labels[10:]).sum()
    return activis.evaluate(labels=labels, scores=scores), correct / len(labels)


@add("evaluate_drop_when_every_score_is_nan", "error", ["nonfinite|non-finite|nan|no instance|nothing"])
def _(tmp):
    import activis
    labels, scores = _nan_scores(k=200)
    return activis.evaluate(labels=labels, scores=scores, nonfinite="drop")


def _dropped(result, warnings):
    e = result
    return int(e.summary["nonfinite"]) == 7 and int(e.per_class["support"].sum()) == 193


@add("evaluate_drop_inf_rows", "handled", check=_dropped)
def _(tmp):
    import activis
    labels, scores = scores_and_labels()
    scores = scores.copy()
    scores[:7, 0] = np.inf
    return activis.evaluate(labels=labels, scores=scores, nonfinite="drop")


@add("compare_stores_nonfinite_unknown", "error", ["nonfinite"])
def _(tmp):
    import activis
    s = store(tmp)
    return activis.compare_stores(s, s, nonfinite="skip")


@add("evaluation_panel_nonfinite_unknown", "error", ["nonfinite"])
def _(tmp):
    import activis
    return activis.EvaluationPanel(store(tmp), nonfinite="skip")
