"""What the doctor reports: findings (one per problem found), the checks it skipped, and the report.

A finding says which check found it, how bad it is, one sentence on what is wrong, the numbers
that show it, where it is (a graph node, a module, a parameter, or the data, loader, loss or
optimizer) and the change to try. A check that could not run is *skipped* with its reason; it is
never counted as passed.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

SEVERITIES = ("error", "warning", "note")
PLACES = ("node", "module", "parameter", "data", "loader", "loss", "optimizer", "model")


class DoctorError(ValueError):
    """The doctor was given something it cannot examine (the message names the problem and the valid forms)."""


@dataclass(frozen=True)
class Finding:
    """One problem found by one check.

    ``place`` is the kind of place (one of `PLACES`), ``where`` its name (a graph node name, module
    path or parameter name; empty for the data, loader, loss or optimizer) and ``node`` the graph
    node (or module path) the finding is drawn on, or None. ``step`` is the training step where a
    finding made while training began (None before training).
    """

    check: str
    severity: str
    title: str
    message: str
    evidence: Mapping[str, float] = field(default_factory=dict)
    place: str = "model"
    where: str = ""
    node: str | None = None
    change: str = ""
    step: int | None = None
    cause: str = ""

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise DoctorError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        if self.place not in PLACES:
            raise DoctorError(f"place must be one of {PLACES}, not {self.place!r}")
        if not self.cause:
            object.__setattr__(self, "cause", self.check)

    def evidence_text(self) -> str:
        return ", ".join(f"{k} = {_number(v)}" for k, v in self.evidence.items())

    def place_text(self) -> str:
        return f"{self.place} {self.where}".strip()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["evidence"] = {k: float(v) for k, v in self.evidence.items()}
        return d


def _number(value) -> str:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.3g}"


_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


class Report:
    """The findings of a checkup (or of a watched training run), most severe first.

    ``diagnoses`` merges the findings that share a cause (`activis.doctor.diagnosis`). ``skipped``
    holds the checks that did not apply (no test data given, ...) and ``failed`` those that could not
    run (an exception): a report with a failed check is never clean. Renders in a notebook
    (``_repr_html_``, every text escaped), converts with `to_dataframe`, and gives the findings on one
    graph node (`at`) and the badges for GraphView (`markers`).
    """

    def __init__(self, findings: Iterable[Finding], skipped: Mapping[str, str] | None = None,
                 ran: Iterable[str] = (), seconds: Mapping[str, float] | None = None,
                 failed: Mapping[str, str] | None = None):
        from .diagnosis import diagnose

        self.findings = sorted(findings, key=lambda f: (_ORDER[f.severity], f.step if f.step is not None else -1))
        self.skipped = dict(skipped or {})
        self.failed = dict(failed or {})
        self.ran = list(ran)
        self.seconds = dict(seconds or {})
        self.diagnoses = diagnose(self.findings)

    def __iter__(self):
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    @property
    def clean(self) -> bool:
        """No error or warning (notes are advice, not problems), and every check that applied ran."""
        return not self.failed and not any(f.severity in ("error", "warning") for f in self.findings)

    @property
    def checks_found(self) -> list[str]:
        return list(dict.fromkeys(f.check for f in self.findings))

    def of(self, check: str) -> list[Finding]:
        return [f for f in self.findings if f.check == check]

    def at(self, node: str) -> list[Finding]:
        """The findings drawn on ``node`` (a graph node name or module path), or inside module ``node``."""
        return [f for f in self.findings if f.node is not None
                and (f.node == node or f.node.startswith(node + ".") or f.where == node)]

    def markers(self) -> dict:
        """{node: {"severity", "count", "title"}} for GraphView: the worst severity wins the badge."""
        result: dict = {}
        for f in self.findings:
            if f.node is None:
                continue
            m = result.setdefault(f.node, {"severity": f.severity, "count": 0, "title": f.title})
            m["count"] += 1
            if _ORDER[f.severity] < _ORDER[m["severity"]]:
                m["severity"], m["title"] = f.severity, f.title
        return result

    def to_dataframe(self):
        import pandas as pd

        columns = ["check", "severity", "title", "message", "evidence", "place", "where", "node", "change", "step",
                   "cause"]
        rows = [{**f.to_dict(), "evidence": f.evidence_text()} for f in self.findings]
        return pd.DataFrame(rows, columns=columns)

    def summary(self) -> str:
        """The headline: the diagnoses by severity and how many checks ran."""
        counts = {s: sum(d.severity == s for d in self.diagnoses) for s in SEVERITIES}
        text = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "no findings"
        total = len(self.ran) + len(self.skipped) + len(self.failed)
        ran = f"{len(self.ran)} of {total} checks ran"
        if self.skipped:
            ran += f", {len(self.skipped)} did not apply"
        if self.failed:
            ran += f", {len(self.failed)} COULD NOT RUN (not clean: {', '.join(self.failed)})"
        return f"{text}; {ran}"

    def __repr__(self) -> str:
        lines = [f"Report: {self.summary()}"]
        for d in self.diagnoses:
            f = d.lead
            step = f" (from step {d.step})" if d.step is not None else ""
            lines.append(f"  [{d.severity}] {d.title} at {f.place_text()}{step}: {f.message} "
                         f"({f.evidence_text()}) -> {f.change}")
            lines.extend(f"      symptom: {s.title}: {s.message}" for s in d.symptoms)
        for check, reason in self.failed.items():
            lines.append(f"  [could not run] {check}: {reason}")
        for check, reason in self.skipped.items():
            lines.append(f"  [did not apply] {check}: {reason}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        colour = {"error": "#b3261e", "warning": "#a15c00", "note": "#3a6ea5"}
        rows = []
        for d in self.diagnoses:
            f = d.lead
            step = f" from step {d.step}" if d.step is not None else ""
            symptoms = "".join(f"<br><i>symptom: {e(s.title)}: {e(s.message)}</i>" for s in d.symptoms)
            rows.append(
                f"<tr><td style='color:{colour[d.severity]};font-weight:600'>{e(d.severity)}</td>"
                f"<td><b>{e(d.title)}</b><br>{e(f.message)}{symptoms}</td><td>{e(f.evidence_text())}</td>"
                f"<td>{e(f.place_text())}{e(step)}</td><td>{e(f.change)}</td></tr>")
        for label, checks in (("could not run", self.failed), ("did not apply", self.skipped)):
            for check, reason in checks.items():
                rows.append(f"<tr><td style='color:#666'>{label}</td><td><b>{e(check)}</b></td>"
                            f"<td colspan='3'>{e(reason)}</td></tr>")
        head = ("<tr><th>severity</th><th>finding</th><th>evidence</th><th>place</th><th>change to try</th></tr>")
        return (f"<div class='activis-doctor-report'><p>{e(self.summary())}</p>"
                f"<table>{head}{''.join(rows)}</table></div>")
