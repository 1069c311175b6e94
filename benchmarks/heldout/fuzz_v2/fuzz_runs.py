"""Bad calls against the run record (open_run, Run.create, findings, metrics, compare, charts), the store's checkpoint
axis (store.at, open_store(step=)), Checkpoints, DynamicsRecorder, read_dynamics and load_params."""

import math
import os

from fuzz_v2_common import ChangedFiles, adder, copy_run, files_of, mlp, np, open_copy, unchanged_or, wine

CASES = []
add = adder(CASES)


# ---------------------------------------------------------------- open_run, Run.create

@add("open_run_missing_folder", "error", ["nope"])
def _(tmp):
    import activis
    return activis.open_run(os.path.join(tmp, "nope"))


@add("open_run_on_a_file", "error", ["run|folder|directory"])
def _(tmp):
    import activis
    path = os.path.join(tmp, "notes.txt")
    with open(path, "w") as f:
        f.write("hello")
    return activis.open_run(path)


@add("open_run_on_an_empty_folder", "error", ["run"])
def _(tmp):
    import activis
    os.makedirs(os.path.join(tmp, "empty"))
    return activis.open_run(os.path.join(tmp, "empty"))


@add("open_run_path_is_an_int", "error", ["path"])
def _(tmp):
    import activis
    return activis.open_run(42)


@add("run_create_over_an_existing_run_without_overwrite", "error", ["exist|overwrite"])
def _(tmp):
    import activis
    path = copy_run(tmp)
    return unchanged_or(path, lambda: activis.Run.create(path, name="b", config={"epochs": 1}))


@add("run_create_config_holds_a_module", "error", ["config"])
def _(tmp):
    import torch

    import activis
    return activis.Run.create(os.path.join(tmp, "b"), name="b", config={"model": torch.nn.Linear(2, 2)})


@add("run_create_config_not_a_mapping", "error", ["config"])
def _(tmp):
    import activis
    return activis.Run.create(os.path.join(tmp, "b"), name="b", config=["epochs", 1])


@add("run_create_name_not_text", "error", ["name"])
def _(tmp):
    import activis
    return activis.Run.create(os.path.join(tmp, "b"), name=123, config={})


# ---------------------------------------------------------------- findings and metrics

@add("add_finding_without_step", "error", ["step"])
def _(tmp):
    run = open_copy(tmp)
    return unchanged_or(os.path.join(tmp, "run"),
                        lambda: run.add_finding({"check": "loss plateau", "severity": "warning"}))


@add("add_finding_unknown_severity", "error", ["severity", "warning"])
def _(tmp):
    run = open_copy(tmp)
    return run.add_finding({"step": 3, "check": "loss plateau", "severity": "catastrophic"})


@add("add_finding_negative_step", "error", ["step"])
def _(tmp):
    run = open_copy(tmp)
    return run.add_finding({"step": -3, "check": "loss plateau", "severity": "warning"})


@add("add_finding_not_a_mapping", "error", ["finding|dict|mapping"])
def _(tmp):
    run = open_copy(tmp)
    return run.add_finding("loss plateau at step 3")


@add("log_checkpoint_metric_twice", "error", ["accuracy"])
def _(tmp):
    run = open_copy(tmp)
    run.log_checkpoint_metrics(3, accuracy=0.91)
    return unchanged_or(os.path.join(tmp, "run"), lambda: run.log_checkpoint_metrics(3, accuracy=0.95))


@add("log_checkpoint_metric_text_value", "error", ["accuracy"])
def _(tmp):
    run = open_copy(tmp)
    return run.log_checkpoint_metrics(3, accuracy="high")


@add("log_checkpoint_metrics_none_given", "error", ["metric"])
def _(tmp):
    run = open_copy(tmp)
    return run.log_checkpoint_metrics(3)


@add("log_checkpoint_metrics_step_as_text", "error", ["step"])
def _(tmp):
    run = open_copy(tmp)
    return run.log_checkpoint_metrics("3", accuracy=0.9)


def _nan_metric_kept(result, warnings):
    frame = result.metrics
    return any(isinstance(v, float) and math.isnan(v) for v in np.ravel(frame.select_dtypes("number").values))


@add("log_checkpoint_metric_nan_is_kept", "handled", ["accuracy"], check=_nan_metric_kept, error_ok=True)
def _(tmp):
    import activis
    run = open_copy(tmp)
    run.log_checkpoint_metrics(5, accuracy=float("nan"))  # a diverged model's reading
    return activis.open_run(os.path.join(tmp, "run"))


# ---------------------------------------------------------------- compare and charts

@add("compare_nothing", "error", ["at least one|empty|no run"])
def _(tmp):
    import activis
    return activis.compare([])


@add("compare_a_missing_folder", "error", ["ghost"])
def _(tmp):
    import activis
    return activis.compare([copy_run(tmp), os.path.join(tmp, "ghost")])


@add("compare_a_float", "error", ["3.14|float"])
def _(tmp):
    import activis
    return activis.compare([copy_run(tmp), 3.14])


@add("compare_the_same_run_twice", "handled", ["same|twice|duplicate"], error_ok=True,
     check=lambda r, w: len(r.configs) == 2)
def _(tmp):
    import activis
    path = copy_run(tmp)
    return activis.compare([path, path])


@add("chart_unknown_series", "error", ["NoSuch", "Loss"])
def _(tmp):
    import activis
    return activis.compare([copy_run(tmp)]).chart(["NoSuch"], width=200)


@add("chart_width_zero", "error", ["width"])
def _(tmp):
    import activis
    return activis.compare([copy_run(tmp)]).chart(["Loss"], width=0)


@add("chart_width_nan", "error", ["width"])
def _(tmp):
    import activis
    return activis.compare([copy_run(tmp)]).chart(["Loss"], width=float("nan"))


@add("chart_start_after_stop", "error", ["start|stop"])
def _(tmp):
    import activis
    return activis.compare([copy_run(tmp)]).chart(["Loss"], start=10, stop=2, width=200)


# ---------------------------------------------------------------- the checkpoint axis

@add("store_at_a_step_that_is_no_checkpoint", "error", ["7", "10"])
def _(tmp):
    return open_copy(tmp).store.at(7)


@add("store_at_a_negative_step", "error", ["-5|step"])
def _(tmp):
    return open_copy(tmp).store.at(-5)


@add("store_at_step_as_text", "error", ["step"])
def _(tmp):
    return open_copy(tmp).store.at("5")


@add("store_at_step_as_bool", "error", ["step"])
def _(tmp):
    return open_copy(tmp).store.at(True)


@add("store_at_integral_float", "handled", ["step"], error_ok=True,
     check=lambda r, w: int(r.step) == 5)
def _(tmp):
    return open_copy(tmp).store.at(5.0)


@add("open_store_with_an_unknown_step", "error", ["3"])
def _(tmp):
    import activis
    return activis.open_store(os.path.join(copy_run(tmp), "probe"), step=3)


# ---------------------------------------------------------------- Checkpoints

def _probe(n=60):
    X, y = wine(120)
    return mlp(), X[:n], y[:n]


@add("checkpoints_every_zero", "error", ["every"])
def _(tmp):
    import activis
    model, X, y = _probe()
    return activis.Checkpoints(model, (X, y), os.path.join(tmp, "r"), every=0)


@add("checkpoints_every_and_steps_both", "error", ["every", "steps"])
def _(tmp):
    import activis
    model, X, y = _probe()
    return activis.Checkpoints(model, (X, y), os.path.join(tmp, "r"), every=5, steps=[0, 10])


@add("checkpoints_negative_step", "error", ["step"])
def _(tmp):
    import activis
    model, X, y = _probe()
    return activis.Checkpoints(model, (X, y), os.path.join(tmp, "r"), steps=[-1, 5])


@add("checkpoints_probe_labels_one_short", "error", ["60|59|length|rows|instances"])
def _(tmp):
    import activis
    model, X, y = _probe()
    cp = activis.Checkpoints(model, (X, y[:59]), os.path.join(tmp, "r"), every=5)
    return cp(0)


@add("checkpoints_two_class_names_for_three_outputs", "error", ["class"])
def _(tmp):
    import activis
    model, X, y = _probe()
    cp = activis.Checkpoints(model, (X, y), os.path.join(tmp, "r"), every=5, class_names=["a", "b"])
    return cp(0)


@add("checkpoints_model_is_text", "error", ["model"])
def _(tmp):
    import activis
    _, X, y = _probe()
    return activis.Checkpoints("mlp", (X, y), os.path.join(tmp, "r"), every=5)


@add("checkpoints_path_is_a_file", "error", ["file|folder|directory|exist"])
def _(tmp):
    import activis
    model, X, y = _probe()
    path = os.path.join(tmp, "r")
    with open(path, "w") as f:
        f.write("x")
    cp = activis.Checkpoints(model, (X, y), path, every=5)
    return cp(0)


@add("checkpoints_step_as_text", "error", ["step"])
def _(tmp):
    import activis
    model, X, y = _probe()
    cp = activis.Checkpoints(model, (X, y), os.path.join(tmp, "r"), every=5)
    return cp("5")


def _steps_after(result, warnings):
    return list(result) == [0, 10]


@add("checkpoints_steps_unsorted_with_a_repeat", "handled", ["steps"], error_ok=True, check=_steps_after)
def _(tmp):
    import activis
    model, X, y = _probe()
    path = os.path.join(tmp, "r")
    cp = activis.Checkpoints(model, (X, y), path, steps=[10, 0, 10])
    for step in range(12):
        cp(step)
    return activis.open_store(os.path.join(path, "probe")).checkpoints


@add("checkpoints_called_again_for_a_done_step", "handled", ["0"], error_ok=True,
     check=lambda r, w: list(r) == [0, 5])
def _(tmp):
    import activis
    model, X, y = _probe()
    path = os.path.join(tmp, "r")
    cp = activis.Checkpoints(model, (X, y), path, every=5)
    for step in (0, 5, 0):
        cp(step)
    return activis.open_store(os.path.join(path, "probe")).checkpoints


# ---------------------------------------------------------------- DynamicsRecorder, read_dynamics, load_params

def _batch(n=4, classes=3, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, classes, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    return torch.arange(n), logits, labels, losses


@add("record_index_longer_than_logits", "error", ["index|rows|instances|length"])
def _(tmp):
    import torch

    import activis
    index, logits, labels, losses = _batch()
    with activis.DynamicsRecorder(os.path.join(tmp, "r")) as rec:
        rec.record(0, torch.arange(5), logits, labels, losses)


@add("record_logits_one_dimensional", "error", ["logits"])
def _(tmp):
    import activis
    index, logits, labels, losses = _batch()
    with activis.DynamicsRecorder(os.path.join(tmp, "r")) as rec:
        rec.record(0, index, logits[:, 0], labels, losses)


@add("record_losses_of_another_batch", "error", ["loss"])
def _(tmp):
    import activis
    index, logits, labels, losses = _batch()
    with activis.DynamicsRecorder(os.path.join(tmp, "r")) as rec:
        rec.record(0, index, logits, labels, losses[:2])


@add("record_negative_index", "error", ["index"])
def _(tmp):
    import activis
    index, logits, labels, losses = _batch()
    with activis.DynamicsRecorder(os.path.join(tmp, "r")) as rec:
        rec.record(0, index - 2, logits, labels, losses)


@add("record_negative_step", "error", ["step"])
def _(tmp):
    import activis
    index, logits, labels, losses = _batch()
    with activis.DynamicsRecorder(os.path.join(tmp, "r")) as rec:
        rec.record(-1, index, logits, labels, losses)


@add("record_after_close", "error", ["close"])
def _(tmp):
    import activis
    index, logits, labels, losses = _batch()
    with activis.DynamicsRecorder(os.path.join(tmp, "r")) as rec:
        rec.record(0, index, logits, labels, losses)
    return rec.record(1, index, logits, labels, losses)


def _nan_loss_kept(result, warnings):
    return bool(np.isnan(np.asarray(result["loss"], float)).any())


@add("record_nan_loss_is_kept", "handled", ["loss|nan"], error_ok=True, check=_nan_loss_kept)
def _(tmp):
    import activis
    index, logits, labels, losses = _batch()
    losses = losses.clone()
    losses[1] = float("nan")
    path = os.path.join(tmp, "r")
    with activis.DynamicsRecorder(path) as rec:
        rec.record(0, index, logits, labels, losses)
    return activis.read_dynamics(os.path.join(path, "dynamics")).frame()


@add("read_dynamics_missing_folder", "error", ["nothing_here|dynamics"])
def _(tmp):
    import activis
    return activis.read_dynamics(os.path.join(tmp, "nothing_here"))


def _torn_row_skipped(result, warnings):
    full, frame = result
    return len(frame) < full and len(warnings) > 0


@add("read_dynamics_torn_last_row", "handled", ["torn|row"], error_ok=True, check=_torn_row_skipped)
def _(tmp):
    import activis
    path = os.path.join(copy_run(tmp), "dynamics")
    full = len(activis.read_dynamics(path).frame())
    files = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".bin")]
    with open(files[0], "r+b") as f:
        f.truncate(os.path.getsize(files[0]) - 3)
    return full, activis.read_dynamics(path).frame()


@add("load_params_of_a_step_never_saved", "error", ["7"])
def _(tmp):
    import activis
    return activis.load_params(copy_run(tmp), 7)


_ = (ChangedFiles, files_of)
