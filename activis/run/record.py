"""`Run`: one training run on disk, the folder `docs/run_record.md` lays out.

The step log (`activis.run.log`) sits at the top level, so every cockpit log folder written before
is a run with only a step log. Beside it: ``run.json`` (name, creation time, configuration,
optimizer, model summary; replaced whole, atomically), ``findings.jsonl`` and ``metrics.jsonl``
(appended, one JSON object a line, each with its step), and the folders other parts fill
(``probe/``: an activation store with checkpoints; ``dynamics/``; ``params/``). Every file is read as
untrusted input: damaged lines are skipped with a warning naming the file and the line, and no path
leads out of the folder. Under torchrun only rank 0 writes (``RANK`` in the environment): the other
ranks' `Run.create` returns a run that writes nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import shutil
import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..paths import folder_path
from .errors import RunError
from .log import META, RECORDS, CockpitError, CockpitLog, _atomic_write, inside, read_log

FORMAT = "activis.run"
FORMAT_VERSION = 1
RUN = "run.json"
FINDINGS = "findings.jsonl"
METRICS = "metrics.jsonl"
PROBE = "probe"
DYNAMICS = "dynamics"
SEVERITIES = ("error", "warning", "note")  # the doctor's (activis.doctor.findings), which sits above the run


def writing_rank() -> bool:
    """Whether this process writes run records: yes, unless torchrun made it a rank other than 0."""
    rank = os.environ.get("RANK", "0")
    return not rank.isdigit() or int(rank) == 0


def _json_text(value, what: str) -> str:
    """``value`` as JSON, or a clear error naming ``what`` (nothing is pickled, nothing is guessed)."""
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise RunError(f"{what} must be plain JSON (dicts with text keys, lists, text, numbers, booleans, "
                       f"None): {exc}") from None


def _whole(value, what: str, *, none: bool = False) -> int | None:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RunError(f"{what} is a step, a whole number of 0 or more{' or None' if none else ''}, not {value!r}")
    return int(value)


class Run:
    """One training run's record. Open one with `open_run`, start one with `Run.create`."""

    def __init__(self, path: str | os.PathLike, *, _write: bool = True):
        self.path = pathlib.Path(path)
        self._write = _write
        self._log: CockpitLog | None = None
        self._scalars = None
        self._info = self._read_info()

    # ------------------------------------------------------------------ creating
    @classmethod
    def create(cls, path: str | os.PathLike, name: str | None = None, config: Mapping | None = None,
               overwrite: bool = False) -> Run:
        """A new, empty run record at ``path`` (a folder that holds no run record yet; with
        ``overwrite``, a run record there is removed first, folder and all). ``config``: the
        hyper-parameters, as plain JSON."""
        path = folder_path(path, "run", RunError)
        if name is not None and not isinstance(name, str):
            raise RunError(f"name is the run's name (text) or None, not {type(name).__name__}")
        if not isinstance(overwrite, bool):
            raise RunError(f"overwrite is True or False, not {overwrite!r}")
        if config is not None and not isinstance(config, Mapping):
            raise RunError(f"config is a mapping of the run's hyper-parameters, not {type(config).__name__}")
        info = {"format": FORMAT, "version": FORMAT_VERSION, "name": name or path.name,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "config": dict(config or {})}
        text = _json_text(info, "config")
        if not writing_rank():
            run = cls(path, _write=False)
            run._info = info
            return run
        taken = (path / RUN).exists() or (path / META).exists()
        if taken and not overwrite:
            raise RunError(f"{path} already holds a run record; pick a folder of its own for each run, or "
                           "overwrite=True to replace it")
        if taken:
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
        _atomic_write(path / RUN, text)
        return cls(path)

    def start_log(self, meta: Mapping, *, fsync_interval: float = 1.0) -> CockpitLog:
        """The run's step log, created for writing (the `Cockpit` does this); in memory on other ranks."""
        self._log = CockpitLog(meta, self.path if self._write else None, fsync_interval=fsync_interval)
        self._scalars = None
        return self._log

    def set_config(self, config: Mapping | None = None, *, optimizer: Mapping | None = None,
                   model: Mapping | None = None) -> None:
        """Add to run.json's configuration (and set its optimizer and model summary); replaced atomically."""
        for what, value in (("config", config), ("optimizer", optimizer), ("model", model)):
            if value is not None and not isinstance(value, Mapping):
                raise RunError(f"{what} is a mapping, not {type(value).__name__}")
        info = {"format": FORMAT, "version": FORMAT_VERSION, "name": self.name, **self._info}
        info.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        info["config"] = {**info.get("config", {}), **(config or {})}
        if optimizer is not None:
            info["optimizer"] = dict(optimizer)
        if model is not None:
            info["model"] = dict(model)
        text = _json_text(info, "the configuration")
        if self._write:
            _atomic_write(inside(self.path, RUN, "run"), text)
        self._info = info

    # ------------------------------------------------------------------ reading
    def _read_info(self) -> dict:
        """run.json, checked; a damaged file or field is set aside with a warning (the rest still reads)."""
        file = self.path / RUN
        if not file.exists():
            return {}
        try:
            info = json.loads(inside(self.path, RUN, "run").read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            warnings.warn(f"{file} is damaged ({type(exc).__name__}); the run is read without it", stacklevel=3)
            return {}
        except CockpitError as exc:
            raise RunError(str(exc)) from None
        if not isinstance(info, dict):
            warnings.warn(f"{file} is damaged (not a JSON object); the run is read without it", stacklevel=3)
            return {}
        if info.get("format") != FORMAT:
            raise RunError(f"{self.path} is not a run record (format {info.get('format')!r} in {file}, "
                           f"expected {FORMAT!r})")
        version = info.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise RunError(f"{self.path} was written by a newer activis (run version {version}; this activis "
                           f"reads version {FORMAT_VERSION})")
        bad = [key for key, kind in (("name", str), ("created", str), ("config", dict), ("optimizer", dict),
                                     ("model", dict)) if key in info and not isinstance(info[key], kind)]
        if bad:
            warnings.warn(f"{file} is damaged (bad {', '.join(map(repr, bad))}); read without them", stacklevel=3)
        return {k: v for k, v in info.items() if k not in bad}

    @property
    def name(self) -> str:
        """run.json's name, else the step log's run name, else the folder's name."""
        if self._info.get("name"):
            return self._info["name"]
        return (self.scalars.run if self.has_log else "") or self.path.name

    @property
    def info(self) -> dict:
        """run.json as read (format, version, name, created, config, optimizer, model)."""
        return dict(self._info)

    @property
    def config(self) -> dict:
        """The hyper-parameters, with ``optimizer`` and ``model`` (its summary) where known; a run that is
        only a cockpit log has what its log recorded (the optimizer, the parameter count)."""
        config = dict(self._info.get("config", {}))
        log_config = self.scalars.config if self.has_log else {}
        for key in ("optimizer", "model"):
            if key in self._info:
                config[key] = self._info[key]
        if "optimizer" not in config and isinstance(log_config.get("optimizer"), dict):
            optimizer = log_config["optimizer"]
            config["optimizer"] = {"class": optimizer.get("type", ""), **optimizer.get("hyperparameters", {})}
        if "model" not in config and self.has_log:
            summary = {"class": self.scalars.meta.get("model"), "parameters": log_config.get("n_parameters")}
            if any(summary.values()):
                config["model"] = {k: v for k, v in summary.items() if v}
        return config

    @property
    def has_log(self) -> bool:
        return self._log is not None or (self.path / META).exists()

    @property
    def log(self) -> CockpitLog | None:
        """The step log (`CockpitLog`), read on first use; None while the run has none."""
        if self._log is None and self.has_log:
            self._log = read_log(self.path)
        return self._log

    @property
    def scalars(self):
        """The step log's scalar series, from its columns where it has them (`activis.run.scalars`)."""
        from .scalars import LogScalars, scalars_of

        if self._scalars is None:
            if self._log is not None:
                self._scalars = LogScalars(self._log)
            elif self.has_log:
                self._scalars = scalars_of(self.path)
            else:
                raise RunError(f"the run {self.path} has no step log yet")
        return self._scalars

    # ------------------------------------------------------------------ findings and metrics
    def add_finding(self, finding: Mapping) -> None:
        """Append one finding (a mapping with its ``step``, or step None) to findings.jsonl.

        A finding without a step is kept on purpose: a checkup's findings (before training) have none.
        A ``severity``, where given, is one of the doctor's (`SEVERITIES`): the views colour by it."""
        if not isinstance(finding, Mapping):
            raise RunError(f"a finding is a mapping (its fields, with 'step'), not {type(finding).__name__}")
        if "severity" in finding and finding["severity"] not in SEVERITIES:
            raise RunError(f"a finding's 'severity' is one of {', '.join(map(repr, SEVERITIES))}, not "
                           f"{finding['severity']!r}")
        record = {"step": _whole(finding.get("step"), "the finding's 'step'", none=True),
                  **{k: v for k, v in finding.items() if k != "step"}}
        if not all(isinstance(k, str) for k in record):
            raise RunError(f"a finding's fields are named by text, not {[k for k in record if not isinstance(k, str)]}")
        self._append(FINDINGS, _json_text(record, "a finding"))

    @property
    def findings(self) -> pd.DataFrame:
        """The doctor's findings, one row each, in the order written."""
        rows = self._read_jsonl(FINDINGS, step_required=False)
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["step"])

    def log_checkpoint_metrics(self, step: int, **values: float) -> None:
        """Record evaluation metrics of the checkpoint at ``step``. A metric is written once per step:
        writing it again is an error that changes no file (other metrics of that step may follow)."""
        step = _whole(step, "step")
        if not values:
            raise RunError("log_checkpoint_metrics needs at least one metric: log_checkpoint_metrics(step, name=value)")
        bad = {k: v for k, v in values.items() if isinstance(v, bool) or not isinstance(v, int | float)}
        if bad:
            raise RunError(f"metrics are numbers; not numbers: {bad}")
        metrics = self.metrics
        if step in metrics.index:
            again = [k for k in values if k in metrics.columns and not pd.isna(metrics.loc[step, k])]
            if again:
                raise RunError(f"step {step} already has {again} in {self.path / METRICS}; a checkpoint's metric is "
                               "written once")
        self._append(METRICS, _json_text({"step": step, **{k: float(v) for k, v in values.items()}}, "metrics"))

    @property
    def metrics(self) -> pd.DataFrame:
        """Evaluation metrics per checkpoint: one row per step, one column per metric."""
        rows = [r for r in self._read_jsonl(METRICS, step_required=True) if self._numeric(r)]
        if not rows:
            return pd.DataFrame(index=pd.Index([], name="step", dtype="int64"))
        frame = pd.DataFrame(rows).groupby("step", sort=True).last()
        return frame

    def _numeric(self, record: dict) -> bool:
        bad = [k for k, v in record.items() if k != "step" and (isinstance(v, bool) or not isinstance(v, int | float))]
        if bad:
            warnings.warn(f"{self.path / METRICS}, step {record['step']}: skipped (not numbers: {bad})", stacklevel=4)
        return not bad

    def _append(self, name: str, text: str) -> None:
        if not self._write:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        with open(inside(self.path, name, "run") if (self.path / name).exists() else self.path / name, "a") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _read_jsonl(self, name: str, *, step_required: bool) -> list[dict]:
        """The objects of a JSON-lines file; damaged lines skipped with one warning naming file and lines."""
        file = self.path / name
        if not file.exists():
            return []
        data = inside(self.path, name, "run").read_bytes()
        rows, damaged = [], []
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line (a writer killed mid-line) waits
        for number, line in enumerate(complete.split(b"\n")[:-1], start=1):
            if not line.strip():
                continue
            reason = None
            try:
                record = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                record, reason = None, type(exc).__name__
            if reason is None and not isinstance(record, dict):
                reason = "not a JSON object"
            elif reason is None:
                step = record.get("step")
                if not (step is None and not step_required) and (
                        isinstance(step, bool) or not isinstance(step, int) or step < 0):
                    reason = f"bad 'step' {step!r}"
            if reason:
                damaged.append(f"line {number} ({reason})")
            else:
                rows.append(record)
        if damaged:
            warnings.warn(f"{file}: skipped {len(damaged)} damaged line(s): {'; '.join(damaged[:10])}", stacklevel=3)
        return rows

    # ------------------------------------------------------------------ what other parts fill
    @property
    def store(self):
        """The probe instances' activation store (``probe/``), or None."""
        if not (self.path / PROBE).exists():
            return None
        from ..store import open_store

        try:
            probe = inside(self.path, PROBE, "run")
        except CockpitError as exc:
            raise RunError(str(exc)) from None
        return open_store(probe)

    @property
    def checkpoints(self) -> list[int]:
        """The steps of the probe store's checkpoints (sorted); a store without any has one, at the step
        log's last step (0 without one); no store, none."""
        store = self.store
        if store is None:
            return []
        steps = getattr(store, "checkpoints", None)
        if steps is not None:
            return sorted(int(s) for s in steps)
        spans = [self.scalars.span(name) for name in self.scalars.names] if self.has_log else []
        return [max((span[1] for span in spans if span is not None), default=0)]

    @property
    def dynamics(self):
        """The per-instance training dynamics (``dynamics/``), or None."""
        if not (self.path / DYNAMICS).exists():
            return None
        from .dynamics import read_dynamics

        return read_dynamics(self.path / DYNAMICS)

    def data_map(self, source: str = "checkpoints"):
        """`activis.data_map` of this run: over the probe store's checkpoints (``"checkpoints"``), or over the
        logits the training loop recorded at each presentation (``"training"``, Toneva's and Cartography's
        own setting: instances presented fewer times than the rest are judged on the presentations all had)."""
        from ..dynamics import data_map, data_map_of  # lazily: the dynamics sit a floor above the run record

        if source == "checkpoints":
            if self.store is None:
                raise RunError(f"{self.path} has no probe store: record checkpoints with activis.Checkpoints, "
                               "or use source='training'.")
            return data_map_of(self.store)
        if source != "training":
            raise RunError(f"source={source!r} is not valid; choose 'checkpoints' or 'training'.")
        dynamics = self.dynamics
        if dynamics is None:
            raise RunError(f"{self.path} has no recorded dynamics: record them with activis.DynamicsRecorder, "
                           "or use source='checkpoints'.")
        logits, labels = dynamics.presentations(), dynamics.labels()
        seen = np.flatnonzero(labels >= 0)
        shown = np.isfinite(logits[:, seen]).all(axis=2).sum(axis=0)
        frame = data_map(logits[: int(shown.min()), seen], labels[seen])
        frame.index = pd.Index(seen, name="instance")
        return frame

    def __repr__(self) -> str:
        parts = [f"{self.scalars.n_steps} steps" if self.has_log else "no step log"]
        if (self.path / PROBE).exists():
            parts.append("a probe store")
        return f"Run({self.name!r}, {', '.join(parts)}, {self.path})"


def open_run(path: str | os.PathLike) -> Run:
    """Open a run folder (or a cockpit log folder written before runs had run.json)."""
    path = folder_path(path, "run", RunError)
    if not path.is_dir():
        raise RunError(f"{path} is not a run record (no such folder)")
    if not any((path / name).exists() for name in (RUN, META, RECORDS)):
        raise RunError(f"{path} is not a run record (no {RUN}, no step log {META})")
    return Run(path)

