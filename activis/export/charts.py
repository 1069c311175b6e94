"""The chart views' data as Altair charts: restyle them, then save PNG, SVG or PDF through vl-convert.

Numbers read as in the views: ``formatNumber`` of ``js/common/format.js`` is the Vega expression
`activis.widgets.format.NUMBER_EXPR`, used for every axis label here, and tooltips show the same
four significant digits. Colours are the views' palette (`activis.widgets.colours`). Altair and
vl-convert bundle Vega, so nothing is fetched: ``chart.save("roc.png")`` works offline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..widgets import colours
from ..widgets.format import NUMBER_EXPR, TOOLTIP_FORMAT
from .errors import ExportError

EVALUATION_CHARTS = ("roc", "pr", "calibration", "distributions", "confusion")


def _axis(title: str):
    import altair as alt

    return alt.Axis(title=title, labelExpr=NUMBER_EXPR)


def _class_scale(names: list[str]):
    import altair as alt

    return alt.Scale(domain=names, range=colours.class_colours(len(names)))


def evaluation_data(evaluation, kind: str) -> pd.DataFrame:
    """One evaluation chart's data as a DataFrame (what `evaluation_chart` draws)."""
    names = [str(n) for n in evaluation.outcomes.class_names]
    classes = [k for k in range(len(names)) if evaluation._has_both(k)]
    if kind in ("roc", "pr"):
        frames = []
        for k in classes:
            if kind == "roc":
                c = evaluation.roc(k)
                frames.append(pd.DataFrame({"class": names[k], "x": c["fpr"], "y": c["tpr"],
                                            "order": np.arange(len(c["fpr"]))}))
            else:
                c = evaluation.precision_recall(k)
                frames.append(pd.DataFrame({"class": names[k], "x": c["recall"], "y": c["precision"],
                                            "order": np.arange(len(c["recall"]))}))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["class", "x", "y", "order"])
    if kind == "calibration":
        return evaluation.reliability().reset_index(drop=True)
    if kind == "distributions":
        d = evaluation.distributions()
        edges = np.asarray(d["edges"], dtype=np.float64)
        rows = []
        for side in ("positives", "negatives"):
            counts = np.asarray(d[side], dtype=np.float64)
            rows.append(pd.DataFrame({"side": side, "lo": edges[:-1], "hi": edges[1:], "count": counts,
                                      "share": counts / max(counts.sum(), 1.0)}))
        return pd.concat(rows, ignore_index=True)
    if kind == "confusion":
        table = evaluation.confusion()
        return table.stack().rename("count").rename_axis(["true", "predicted"]).reset_index()
    raise ExportError(f"kind={kind!r} is not an evaluation chart; choose one of {', '.join(EVALUATION_CHARTS)}.")


def evaluation_chart(evaluation, kind: str = "roc"):
    """An Altair chart of an `Evaluation`: ROC or PR curves per class, calibration, score distributions
    of the focus class, or the confusion matrix."""
    import altair as alt

    data = evaluation_data(evaluation, kind)
    names = [str(n) for n in evaluation.outcomes.class_names]
    if kind in ("roc", "pr"):
        x, y = ("false positive rate", "true positive rate") if kind == "roc" else ("recall", "precision")
        return alt.Chart(data, title="ROC" if kind == "roc" else "Precision-recall").mark_line().encode(
            x=alt.X("x:Q", axis=_axis(x), scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("y:Q", axis=_axis(y), scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("class:N", scale=_class_scale(names), sort=names), order="order:Q",
            tooltip=["class:N", alt.Tooltip("x:Q", format=TOOLTIP_FORMAT), alt.Tooltip("y:Q", format=TOOLTIP_FORMAT)])
    if kind == "calibration":
        columns = list(data.columns)
        x, y = columns[0], columns[1]
        line = alt.Chart(data, title="Calibration").mark_line(point=True).encode(
            x=alt.X(f"{x}:Q", axis=_axis("confidence"), scale=alt.Scale(domain=[0, 1])),
            y=alt.Y(f"{y}:Q", axis=_axis("accuracy"), scale=alt.Scale(domain=[0, 1])),
            tooltip=[alt.Tooltip(c, format=TOOLTIP_FORMAT) for c in columns])
        diagonal = alt.Chart(pd.DataFrame({"a": [0, 1]})).mark_line(strokeDash=[4, 4], color=colours.MISSING).encode(
            x="a:Q", y="a:Q")
        return diagonal + line
    if kind == "distributions":
        return alt.Chart(data, title="Score distributions").mark_bar(opacity=0.6).encode(
            x=alt.X("lo:Q", axis=_axis("score")), x2="hi:Q",
            y=alt.Y("share:Q", axis=_axis("share"), stack=None),
            color=alt.Color("side:N", scale=alt.Scale(range=colours.class_colours(2))),
            tooltip=["side:N", *(alt.Tooltip(f"{c}:Q", format=TOOLTIP_FORMAT) for c in ("lo", "share"))])
    return alt.Chart(data, title="Confusion (rows: true)").mark_rect().encode(
        x=alt.X("predicted:N", sort=names), y=alt.Y("true:N", sort=names),
        color=alt.Color("count:Q", scale=alt.Scale(scheme="blues")),
        tooltip=["true:N", "predicted:N", "count:Q"]) + alt.Chart(data).mark_text().encode(
        x=alt.X("predicted:N", sort=names), y=alt.Y("true:N", sort=names), text="count:Q")


def series_chart(frame: pd.DataFrame, series: list[str], *, title: str = ""):
    """Per-step series as lines: one panel per series, one colour per run (column ``run``, if any)."""
    import altair as alt

    missing = [s for s in series if s not in frame.columns]
    if missing:
        raise ExportError(f"No series {', '.join(map(repr, missing))}; choose among "
                          f"{', '.join(c for c in frame.columns if c not in ('run', 'step'))}.")
    ids = ["step", "run"] if "run" in frame.columns else ["step"]
    long = frame[ids + list(series)].melt(id_vars=ids, var_name="series", value_name="value").dropna()
    runs = sorted(long["run"].unique()) if "run" in long.columns else []
    encoding = {
        "x": alt.X("step:Q", axis=alt.Axis(title="step", labelExpr=NUMBER_EXPR)),
        "y": alt.Y("value:Q", axis=_axis(""), scale=alt.Scale(zero=False)),
        "tooltip": [*(["run:N"] if runs else []), "step:Q", alt.Tooltip("value:Q", format=TOOLTIP_FORMAT)],
    }
    if runs:
        encoding["color"] = alt.Color("run:N", scale=alt.Scale(domain=runs, range=colours.run_colours(len(runs))))
    chart = alt.Chart(long, title=title).mark_line().encode(**encoding).properties(width=280, height=160)
    return chart.facet(facet=alt.Facet("series:N", title=None), columns=3).resolve_scale(y="independent")


def data_map_data(data_map: pd.DataFrame) -> pd.DataFrame:
    """The data map's points, one row per instance (``instance`` is its index in the store)."""
    frame = data_map[["confidence", "variability", "correctness", "forgetting"]].reset_index(drop=True)
    return frame.rename_axis("instance").reset_index()


def data_map_chart(data_map: pd.DataFrame, color_by: str = "correctness"):
    """Dataset Cartography's map as an Altair chart: variability x confidence, coloured as the view colours."""
    import altair as alt

    if color_by not in ("correctness", "forgetting"):
        raise ExportError(f"color_by={color_by!r} is not a data-map colouring; choose correctness or forgetting.")
    data = data_map_data(data_map)
    ramp = list(colours.CORRECTNESS[::-1]) if color_by == "correctness" else list(colours.VIRIDIS)
    domain = [0, 1] if color_by == "correctness" else [0, 4]
    return alt.Chart(data, title="Data map").mark_circle(size=14, opacity=0.7).encode(
        x=alt.X("variability:Q", axis=_axis("variability")),
        y=alt.Y("confidence:Q", axis=_axis("confidence"), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color(f"{color_by}:Q", scale=alt.Scale(domain=domain, range=ramp, clamp=True)),
        tooltip=["instance:Q", *(alt.Tooltip(f"{c}:Q", format=TOOLTIP_FORMAT)
                                 for c in ("confidence", "variability", "correctness")), "forgetting:Q"])


def cka_data(matrix: pd.DataFrame) -> pd.DataFrame:
    """The CKA heatmap's cells as a long table: layer, step, cka."""
    return matrix.stack().rename("cka").reset_index()


def cka_chart(matrix: pd.DataFrame):
    """The layers x checkpoints CKA heatmap as an Altair chart (which layers settle first)."""
    import altair as alt

    data = cka_data(matrix)
    layers = [str(layer) for layer in matrix.index]
    encoding = {"x": alt.X("step:O", title="step"), "y": alt.Y("layer:N", sort=layers, title=None)}
    cells = alt.Chart(data, title="CKA with the final checkpoint").mark_rect().encode(
        **encoding, color=alt.Color("cka:Q", scale=alt.Scale(domain=[0, 1], range=list(colours.VIRIDIS))),
        tooltip=["layer:N", "step:O", alt.Tooltip("cka:Q", format=TOOLTIP_FORMAT)])
    text = alt.Chart(data).mark_text(fontSize=10).encode(
        **encoding, text=alt.Text("cka:Q", format=".2f"),
        color=alt.condition("datum.cka < 0.5", alt.value("white"), alt.value("black")))
    return cells + text
