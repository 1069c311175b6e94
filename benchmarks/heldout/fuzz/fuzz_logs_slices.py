"""Bad calls against cockpit logs, runs, slice discovery, write_store/capture metadata and subsets (issue #26).

Hostile logs are copies of a real 6-step log (template_log/) with one thing damaged."""

import os
import sys

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_common import (  # noqa: E402
    append_record_lines,
    case,
    copy_log,
    edit_meta,
    frame,
    make_store,
    mlp,
    replace_records,
    warned_about,
)

import activis  # noqa: E402

CASES = []
ROWS = 6  # steps in the template log


def add(*args, **kwargs):
    def register(call):
        CASES.append(case(*args, **kwargs)(call))
        return call
    return register


def _frame_kept(*words):
    """The log still reads its 6 good steps with a numeric Loss, and a warning names the damage."""
    def check(frame_, warnings):
        return (len(frame_) == ROWS and pd.api.types.is_numeric_dtype(frame_["Loss"])
                and warned_about(warnings, *words))
    return check


def _read_frame(log_dir):
    return activis.read_log(log_dir).frame()


def _meta(change):
    def call(tmp):
        d = copy_log(tmp)
        edit_meta(d, change)
        return _read_frame(d)
    return call


add("log_meta_is_a_list", "handled", check=_frame_kept("meta.json"))(_meta(lambda m: [m]))
add("log_meta_params_is_a_mapping", "handled", check=_frame_kept("meta.json"))(
    _meta(lambda m: {**m, "params": {"0.weight": [8, 4]}}))
add("log_meta_quantities_is_text", "handled", check=_frame_kept("meta.json"))(
    _meta(lambda m: {**m, "quantities": "Loss,GradNorm"}))
add("log_meta_arrays_is_a_list", "handled", check=_frame_kept("meta.json"))(
    _meta(lambda m: {**m, "arrays": ["GradHist1d"]}))


def _records(lines, raw=False):
    def call(tmp):
        d = copy_log(tmp)
        append_record_lines(d, lines, raw=raw)
        return _read_frame(d)
    return call


add("log_record_is_a_list", "handled", check=_frame_kept("records.jsonl"))(_records([[1, 2, 3]]))
add("log_text_in_numeric_series", "handled", check=_frame_kept("records.jsonl"))(
    _records([{"step": 6, "Loss": "abc"}]))
add("log_list_where_a_number_belongs", "handled", check=_frame_kept("records.jsonl"))(
    _records([{"step": 6, "Loss": [1.0, 2.0]}]))
add("log_mapping_in_layer_series", "handled", check=_frame_kept("records.jsonl"))(
    _records([{"step": 6, "GradNorm": {"a": 1}}]))
add("log_step_is_text", "handled", check=_frame_kept("records.jsonl"))(_records([{"step": "6", "Loss": 1.0}]))
add("log_step_is_bool", "handled", check=_frame_kept("records.jsonl"))(_records([{"step": True, "Loss": 1.0}]))
add("log_step_is_float", "handled", check=_frame_kept("records.jsonl"))(_records([{"step": 6.5, "Loss": 1.0}]))
add("log_step_is_huge", "handled", check=lambda f, w: len(f) in (ROWS, ROWS + 1))(
    _records([{"step": 10 ** 30, "Loss": 1.0}]))
add("log_not_utf8_line", "handled", check=_frame_kept("records.jsonl"))(
    _records([b'\xff\xfe{"step": 6, "Loss": 1.0}'], raw=True))
add("log_deeply_nested_line", "handled", check=_frame_kept("records.jsonl"))(
    _records([b'{"step": 6, "Loss": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"], raw=True))
add("log_nan_literal", "handled", check=lambda f, w: len(f) in (ROWS, ROWS + 1))(
    _records([b'{"step": 6, "Loss": NaN}'], raw=True))
add("log_histogram_row_is_text", "handled", check=_frame_kept("records.jsonl"))(
    _records([{"step": 6, "Loss": 1.0, "_rows": {"GradHist1d": "zero"}}]))


def _secret(tmp, name="outside.bin"):
    """A file outside the log folder that a histogram must never be read from: int64 cells of SECRET."""
    path = os.path.join(str(tmp), name)
    np.full((4, 100), SECRET, dtype="<i8").tofile(path)
    return path


SECRET = 7919  # a prime no real histogram's counts are all multiples of


def _histogram_not_secret(result, warnings):
    """Nothing was read from the secret file (histograms may be summed over layers and steps: look for
    counts that are all multiples of SECRET)."""
    if result is None:
        return True
    counts = np.asarray(result[0] if isinstance(result, tuple) else result)
    return not (counts.size and counts.max() > 0 and np.all(counts % SECRET == 0))


@add("log_array_name_points_outside", "handled", check=_histogram_not_secret, error_ok=True,
     mentions=["outside"])
def _(tmp):
    _secret(tmp)
    d = copy_log(tmp)
    edit_meta(d, lambda m: {**m, "arrays": {**m["arrays"], "../outside": {"dtype": "<i8", "shape": [4, 100]}}})
    append_record_lines(d, [{"step": 6, "Loss": 1.0, "_rows": {"../outside": 0}}])
    log = activis.read_log(d)
    return log.histogram("../outside", 6, 7) if "../outside" in str(log.meta) else None


@add("log_histogram_symlinked_out", "handled", check=_histogram_not_secret, error_ok=True,
     mentions=["GradHist1d|symlink"])
def _(tmp):
    d = copy_log(tmp)
    target = os.path.join(str(tmp), "secret.bin")
    np.full((ROWS, 4, 100), SECRET, dtype="<i8").tofile(target)
    os.remove(os.path.join(d, "GradHist1d.bin"))
    os.symlink(target, os.path.join(d, "GradHist1d.bin"))
    return activis.read_log(d).histogram("GradHist1d")


@add("log_huge_declared_shape", "error", ["GradHist1d|shape|size"])
def _(tmp):
    d = copy_log(tmp)
    edit_meta(d, lambda m: {**m, "arrays": {"GradHist1d": {"dtype": "<i8", "shape": [10 ** 9, 10 ** 9]}}})
    return activis.read_log(d).histogram("GradHist1d")


@add("log_object_dtype_array", "error", ["dtype|GradHist1d"])
def _(tmp):
    d = copy_log(tmp)
    edit_meta(d, lambda m: {**m, "arrays": {"GradHist1d": {"dtype": "|O", "shape": [4, 100]}}})
    return activis.read_log(d).histogram("GradHist1d")


@add("log_histogram_row_past_the_file", "handled", error_ok=True, mentions=["GradHist1d"],
     check=lambda r, w: r is not None and warned_about(w, "GradHist1d"))
def _(tmp):
    d = copy_log(tmp)
    append_record_lines(d, [{"step": 6, "Loss": 1.0, "_rows": {"GradHist1d": 10 ** 9}}])
    return activis.read_log(d).histogram("GradHist1d")


@add("log_without_meta", "handled", check=lambda f, w: len(f) == ROWS, error_ok=True, mentions=["meta.json"])
def _(tmp):
    d = copy_log(tmp)
    os.remove(os.path.join(d, "meta.json"))
    return _read_frame(d)


@add("log_path_missing", "error", ["nowhere"])
def _(tmp):
    return activis.read_log(os.path.join(str(tmp), "nowhere"))


@add("log_path_is_a_file", "error", ["records.jsonl"])
def _(tmp):
    return activis.read_log(os.path.join(copy_log(tmp), "records.jsonl"))


@add("log_records_empty", "handled", check=lambda f, w: len(f) == 0, error_ok=True, mentions=["records"])
def _(tmp):
    d = copy_log(tmp)
    replace_records(d, [])
    return _read_frame(d)


# ---- runs ------------------------------------------------------------------------------------------------------


@add("load_runs_empty", "error", ["runs|empty"])
def _(tmp):
    return activis.load_runs([])


@add("load_runs_missing_folder", "error", ["nowhere"])
def _(tmp):
    return activis.load_runs({"a": os.path.join(str(tmp), "nowhere")})


@add("load_runs_int_name", "handled", check=lambda f, w: len(f) > 0, error_ok=True, mentions=["name"])
def _(tmp):
    return activis.load_runs({1: copy_log(tmp)})


@add("compare_runs_same_folder_twice", "handled", error_ok=True, mentions=["duplicate|twice|same"],
     check=lambda r, w: len(set(r.names)) == 2)
def _(tmp):
    d = copy_log(tmp)
    return activis.compare_runs([d, d])


@add("compare_runs_parting_unknown_run", "error", ["zebra"])
def _(tmp):
    d = copy_log(tmp)
    return activis.compare_runs({"a": d, "b": copy_log(tmp, "b")}).parting("a", "zebra")


@add("compare_runs_config_is_text", "handled", check=lambda r, w: r.configs is not None)
def _(tmp):
    d = copy_log(tmp)
    edit_meta(d, lambda m: {**m, "config": "SGD lr=0.1"})
    return activis.compare_runs({"a": d, "b": copy_log(tmp, "b")})


@add("runs_panel_not_runs", "error", ["runs"])
def _(tmp):
    return activis.RunsPanel(123)


@add("runs_panel_negative_throttle", "error", ["throttle"])
def _(tmp):
    return activis.RunsPanel({"a": copy_log(tmp)}, throttle=-1)


@add("runs_panel_zero_poll", "error", ["poll"])
def _(tmp):
    return activis.RunsPanel({"a": copy_log(tmp)}, poll=0)


@add("runs_panel_unknown_series", "error", ["NoSuchSeries"])
def _(tmp):
    return activis.RunsPanel({"a": copy_log(tmp)}, series=["NoSuchSeries"])


@add("runs_panel_text_in_series_warns", "handled", check=lambda p, w: warned_about(w, "records.jsonl"))
def _(tmp):
    d = copy_log(tmp)
    append_record_lines(d, [{"step": 6, "Loss": "abc"}])
    return activis.RunsPanel({"a": d})


# ---- slice discovery ------------------------------------------------------------------------------------------


def _report_made(report, warnings):
    return report is not None and report.to_frame() is not None


def _store_with(tmp, **columns):
    meta = frame()
    for name, values in columns.items():
        meta[name] = values
    return make_store(tmp, metadata=meta)


@add("slices_datetime_column_searched", "handled",
     check=lambda r, w: "seen" in r.to_frame().to_string())
def _(tmp):
    n = 400
    seen = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(n) % 365, unit="D")
    meta = frame()
    meta["seen"] = seen
    store = make_store(tmp, metadata=meta, planted=np.asarray(seen >= pd.Timestamp("2024-09-01")))
    return activis.discover_slices(store, None)


@add("slices_list_valued_column", "handled", check=_report_made)
def _(tmp):
    return activis.discover_slices(_store_with(tmp, tags=[["x", "y"]] * 400), None)


@add("slices_mixed_type_column", "handled", check=_report_made)
def _(tmp):
    return activis.discover_slices(_store_with(tmp, code=[1, "a", 2.5, None] * 100), None)


@add("slices_all_nan_column", "handled", check=_report_made)
def _(tmp):
    return activis.discover_slices(_store_with(tmp, empty=np.full(400, np.nan)), None)


@add("slices_nullable_int_column", "handled", check=_report_made)
def _(tmp):
    return activis.discover_slices(_store_with(tmp, visits=pd.array([1, None, 3, 4] * 100, dtype="Int64")), None)


@add("slices_categorical_and_bool_columns", "handled", check=_report_made)
def _(tmp):
    return activis.discover_slices(_store_with(tmp, grade=pd.Categorical(["lo", "hi"] * 200),
                                               flag=np.array([True, False, False, True] * 100)), None)


@add("slices_unknown_column", "error", ["nosuch"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, columns=["nosuch"])


@add("slices_unknown_layer", "error", ["nosuch"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), "nosuch")


@add("slices_metric_wrong_length", "error", ["metric"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, metric=np.zeros(10))


@add("slices_metric_unknown_name", "error", ["metric"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, metric="accuracy_please")


@add("slices_metric_with_nan", "error", ["metric"])
def _(tmp):
    metric = np.random.default_rng(0).random(400)
    metric[::7] = np.nan
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, metric=metric)


@add("slices_min_support_zero", "error", ["min_support"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, min_support=0)


@add("slices_max_level_zero", "error", ["max_level"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, max_level=0)


@add("slices_unknown_correction", "error", ["correction"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, correction="bonferroni-ish")


@add("slices_alpha_above_one", "error", ["alpha"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, alpha=2.0)


@add("slices_n_bins_one", "error", ["n_bins"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, n_bins=1)


@add("slices_top_k_zero", "error", ["top_k"])
def _(tmp):
    return activis.discover_slices(make_store(tmp, metadata=frame()), None, top_k=0)


# ---- a metadata column named like something the query language or the store already means --------------------


def _reversed_index_frame():
    meta = frame()
    meta["index"] = np.arange(400)[::-1]  # a reset_index() of data sorted the other way
    return meta


def _index_query_right(result, warnings):
    subsets = activis.Subsets(result)
    subsets.add("low", "index < 10")
    return set(subsets.indices("low").tolist()) == set(range(390, 400))


@add("write_store_metadata_index_column", "handled", check=_index_query_right, error_ok=True, mentions=["index"])
def _(tmp):
    return make_store(tmp, metadata=_reversed_index_frame())


@add("capture_metadata_index_column", "handled", check=_index_query_right, error_ok=True, mentions=["index"])
def _(tmp):
    X = torch.randn(400, 13, generator=torch.Generator().manual_seed(0))
    return activis.capture(mlp(), X, os.path.join(str(tmp), "c.activis"), labels=np.arange(400) % 3,
                           metadata=_reversed_index_frame(), progress=False)


@add("slices_on_index_column_select_right_rows", "handled", error_ok=True, mentions=["index"],
     check=lambda r, w: r)
def _(tmp):
    planted = np.arange(400) >= 300  # metadata index < 100
    store = make_store(tmp, metadata=_reversed_index_frame(), planted=planted)
    report = activis.discover_slices(store, None, columns=["index", "age"])
    subsets = activis.Subsets(store)
    for i, found in enumerate(report.slices):
        members = getattr(found, "members", None)
        if members is None:
            continue
        name = subsets.add(f"s{i}", found.definition).name
        if set(subsets.indices(name).tolist()) != set(np.asarray(members).tolist()):
            return False
    return True


@add("write_store_metadata_label_column", "handled", error_ok=True, mentions=["label"],
     check=lambda s, w: pd.api.types.is_numeric_dtype(s.instances["label"]))
def _(tmp):
    meta = frame()
    meta["label"] = ["spam", "ham"] * 200
    return make_store(tmp, metadata=meta)


@add("subsets_column_named_like_a_keyword", "handled", error_ok=True, mentions=["and"],
     check=lambda s, w: len(_query(s, "`and` > 0")) == int((_and_values() > 0).sum()))
def _(tmp):
    meta = frame()
    meta["and"] = _and_values()
    return make_store(tmp, metadata=meta)


def _and_values():
    return np.random.default_rng(3).normal(size=400)


def _query(store, text):
    subsets = activis.Subsets(store)
    subsets.add("q", text)
    return subsets.indices("q")


@add("subsets_column_named_score", "handled", error_ok=True, mentions=["score"],
     check=lambda s, w: len(_query(s, "`score` > 0.5")) == 200)
def _(tmp):
    meta = frame()
    meta["score"] = np.tile([0.9, 0.1], 200)
    return make_store(tmp, metadata=meta)


@add("write_store_metadata_duplicate_columns", "error", ["age"])
def _(tmp):
    meta = frame()
    meta = pd.concat([meta, meta[["age"]]], axis=1)
    return make_store(tmp, metadata=meta)


@add("write_store_metadata_wrong_rows", "error", ["metadata"])
def _(tmp):
    return make_store(tmp, metadata=frame(n=300))


@add("write_store_metadata_int_column_names", "handled", error_ok=True, mentions=["column"],
     check=lambda s, w: s.instances is not None)
def _(tmp):
    meta = pd.DataFrame(np.random.default_rng(0).normal(size=(400, 3)))
    return make_store(tmp, metadata=meta)


@add("subsets_reserved_name_index", "handled", error_ok=True, mentions=["index"],
     check=lambda s, w: len(s.indices("index")) == int((frame()["age"] > 60).sum()))
def _(tmp):
    subsets = activis.Subsets(make_store(tmp, metadata=frame()))
    subsets.add("index", "age > 60")
    return subsets
