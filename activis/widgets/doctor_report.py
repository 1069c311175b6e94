"""DoctorReport: the training doctor's findings as a list, linked to a GraphView and a CockpitPanel.

A thin view over a `Report` (from `activis.checkup`) or over a running cockpit's `TrainingDoctor`
(live: each new finding is shown as it appears). ``link(graph_view)`` puts the findings on the
graph (GraphView's ``markers``) and ties the selection together both ways (the graph's
``selected_layer`` is the report's ``selected_node``): clicking a finding selects its node,
clicking a node lists its findings. ``with_cockpit`` lays a report next to a CockpitPanel and
switches the panel to the layer of the finding clicked.
"""

from __future__ import annotations

import threading

import traitlets

from ..doctor.findings import Report
from ._base import View, bundle
from .errors import ViewError


class DoctorReport(View):
    """``DoctorReport(report)``, ``DoctorReport(cockpit)`` (its doctor) or ``DoctorReport(cockpit.doctor)``.

    ``selected_node`` is a graph node name or module path ("" for none): set by clicking a finding,
    or by a linked GraphView; the list then shows that node's findings first and marks them.
    ``selected_finding`` is the index of the finding clicked (-1 for none).
    """

    _esm = bundle("doctor_report")
    height = traitlets.Int(360).tag(sync=True)

    findings = traitlets.List(traitlets.Dict()).tag(sync=True)
    skipped = traitlets.List(traitlets.Dict()).tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)
    markers = traitlets.Dict().tag(sync=True)
    selected_node = traitlets.Unicode("").tag(sync=True)
    selected_finding = traitlets.Int(-1).tag(sync=True)

    def __init__(self, source, *, graph=None, **kwargs):
        """One row per diagnosis (findings sharing a cause merged; the others listed as its symptoms)."""
        doctor = getattr(source, "doctor", source)
        if not isinstance(doctor, Report) and not hasattr(doctor, "report"):
            raise ViewError("DoctorReport shows a Report (activis.checkup), a Cockpit made with doctor=True or its "
                            f"TrainingDoctor, not {type(source).__name__}")
        super().__init__(**kwargs)
        self._graph = graph
        self._doctor = None if isinstance(doctor, Report) else doctor
        self._lock = threading.Lock()
        self._show(doctor if isinstance(doctor, Report) else doctor.report())
        self._unsubscribe = doctor.subscribe(self._on_finding) if self._doctor is not None else None
        self.observe(self._on_finding_clicked, names=["selected_finding"])

    @property
    def report(self) -> Report:
        return self._report

    def _on_finding(self, _finding) -> None:
        self._show(self._doctor.report())

    def _show(self, report: Report) -> None:
        with self._lock:
            self._report = report
            rows = []
            for i, d in enumerate(report.diagnoses):  # one row per cause; its other findings are symptoms
                f = d.lead
                rows.append({"index": i, "check": f.check, "cause": d.cause, "severity": d.severity,
                             "title": d.title, "message": f.message, "evidence": f.evidence_text(),
                             "place": f.place_text(), "node": f.node or "", "change": f.change,
                             "step": -1 if d.step is None else int(d.step), "keys": self._keys(f),
                             "symptoms": [f"{s.title}: {s.message}" for s in d.symptoms]})
            with self.hold_sync():
                self.findings = rows
                self.skipped = ([{"check": c, "reason": f"COULD NOT RUN: {r}"} for c, r in report.failed.items()]
                                + [{"check": c, "reason": r} for c, r in report.skipped.items()])
                self.summary = report.summary()
                self.markers = report.markers()

    def _keys(self, finding) -> list[str]:
        """Every selection under which the finding is listed: its node, place and enclosing modules."""
        keys = [k for k in (finding.node, finding.where) if k]
        graph = self._graph
        path = None
        if graph is not None and finding.node in graph:
            node = graph.node(finding.node)
            path = node.target if node.op == "call_module" else node.module_path
        elif finding.node and graph is not None and finding.node in graph.modules:
            path = finding.node
        if path:
            parts = path.split(".")
            keys += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        return list(dict.fromkeys(keys))

    def _on_finding_clicked(self, change) -> None:
        i = change["new"]
        if 0 <= i < len(self.findings) and self.findings[i]["node"]:
            self.selected_node = self.findings[i]["node"]

    def link(self, graph_view) -> DoctorReport:
        """Show the findings on ``graph_view`` and share the selected node with it (both ways)."""
        if self._graph is None:
            self._graph = graph_view.computation_graph
            self._show(self._report)
        self._links = [traitlets.dlink((self, "markers"), (graph_view, "markers")),
                       traitlets.link((self, "selected_node"), (graph_view, "selected_layer"))]
        return self

    def close(self) -> None:
        if getattr(self, "_unsubscribe", None) is not None:
            self._unsubscribe()
            self._unsubscribe = None
        super().close()

    def data(self):
        """The findings listed, one row per diagnosis: severity, cause, place, step (-1: from the start), title,
        evidence, message, node, check, symptoms (one line each) and whether it is the finding clicked."""
        import pandas as pd

        columns = ["severity", "cause", "place", "step", "title", "evidence", "message", "node", "check", "symptoms"]
        frame = pd.DataFrame(self.findings, columns=columns)
        frame["symptoms"] = frame["symptoms"].map("\n".join)
        return frame.assign(selected=frame.index == self.selected_finding)


def with_cockpit(panel, report: DoctorReport):
    """A CockpitPanel above its run's live findings; clicking a finding about a layer shows that layer,
    and its step range from the step where the finding began."""
    import ipywidgets

    def show_layer(change):
        i = change["new"]
        if not 0 <= i < len(report.findings):
            return
        row = report.findings[i]
        if row["node"] in panel.layers:
            panel.layer = row["node"]
        if row["step"] >= 0:
            panel.step_range = [float(row["step"]), float(max(panel.log.steps or [row["step"]]))]

    report.observe(show_layer, names=["selected_finding"])
    return ipywidgets.VBox([panel, report])
