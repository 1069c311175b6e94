"""Checkpoints during training: what each holds, that training is not perturbed, adding to a store, a kill in
the middle of a checkpoint, parameters, and the per-instance dynamics recorded from the training loop
(also from two torchrun ranks)."""

import copy
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_capture import free_port
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from activis import Checkpoints, DynamicsRecorder, capture, load_params, read_dynamics
from activis.capturing import CaptureError, CaptureTargetExistsError
from activis.run.dynamics import DynamicsError, DynamicsWriter, row_dtype
from activis.run.params import ParamsError, param_steps
from activis.store import open_store

REPO = pathlib.Path(__file__).resolve().parent.parent
WORKER = pathlib.Path(__file__).resolve().parent / "checkpoint_worker.py"


def net() -> nn.Module:
    """Dropout and batch norm: a checkpoint must neither draw random numbers nor update running statistics."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))


def data(n=256):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, :4].argmax(1) + (torch.rand(n, generator=g) < 0.1).long()) % 4


class Indexed(Dataset):
    """Items (x, y, index): the training loop records each instance's dynamics under its index."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def train(model, steps=12, checkpoints=None, recorder=None, snapshots=None):
    """A plain training loop; ``snapshots`` collects the model as it was at each checkpoint."""
    x, y = data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(Indexed(x, y), batch_size=32, shuffle=True, generator=None)
    step = 0
    while step < steps:
        for xb, yb, index in loader:
            if checkpoints is not None and checkpoints.due(step) and snapshots is not None:
                snapshots[step] = copy.deepcopy(model).eval()
            if checkpoints is not None:
                checkpoints(step)
            logits = model(xb)
            losses = F.cross_entropy(logits, yb, reduction="none")
            if recorder is not None:
                recorder.record(step, index, logits, yb, losses)
            opt.zero_grad()
            losses.mean().backward()
            opt.step()
            step += 1
            if step == steps:
                break
    return model


def test_training_is_not_perturbed_and_each_checkpoint_is_the_model_at_its_step(tmp_path):
    plain = train(net())
    state_after_plain = torch.get_rng_state()
    probe_x, probe_y = data(100)
    snapshots = {}
    model = net()
    checkpoints = Checkpoints(model, TensorDataset(probe_x, probe_y), tmp_path / "run", every=4,
                              layers=["1", "4"], class_names=list("abcd"), metadata={"row": np.arange(100)})
    with DynamicsRecorder(tmp_path / "run") as recorder:
        trained = train(model, checkpoints=checkpoints, recorder=recorder, snapshots=snapshots)
    assert torch.equal(torch.get_rng_state(), state_after_plain)  # the same random numbers drawn
    for (name, a), b in zip(plain.state_dict().items(), trained.state_dict().values()):
        assert torch.equal(a, b), name  # bit for bit, running statistics included
    store = open_store(tmp_path / "run" / "probe")
    assert store.checkpoints == [0, 4, 8] == checkpoints.taken and store.step == 8
    for step, snapshot in snapshots.items():
        at = store.at(step)
        with torch.no_grad():
            bn = snapshot[1](snapshot[0](probe_x))
            out = snapshot(probe_x)
        np.testing.assert_allclose(at.activations("1"), bn.numpy().astype(np.float16), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(at.outputs, out.numpy(), rtol=1e-5, atol=1e-5)
        assert at.instances["label_name"].tolist() == [list("abcd")[i] for i in probe_y]
        assert at.instances["row"].tolist() == list(range(100))
    dynamics = read_dynamics(tmp_path / "run" / "dynamics")
    frame = dynamics.frame()
    assert len(frame) == 12 * 32 and sorted(frame["step"].unique()) == list(range(12))
    per_epoch = dynamics.presentations()
    assert per_epoch.shape == (2, 256, 4)  # 12 batches of 32: one epoch of 256, then half of another
    assert np.isnan(per_epoch[1]).all(axis=1).sum() == 256 - 4 * 32
    np.testing.assert_array_equal(dynamics.labels(), data()[1].numpy())


def test_every_steps_and_findings_decide_when(tmp_path):
    model = net()
    x, y = data(64)
    checkpoints = Checkpoints(model, (x, y), tmp_path / "run", steps=[2, 5])
    taken = [s for s in range(8) if checkpoints(s) is not None]
    assert taken == [2, 5]
    finding = types.SimpleNamespace(check="exploding_gradients", step=6)  # a doctor's Finding has .step
    checkpoints.on_finding(finding)  # now: the model at the last step reported, 7
    checkpoints.on_finding({"check": "loss_spike", "step": 7})  # already there: kept
    assert open_store(tmp_path / "run" / "probe").checkpoints == [2, 5, 7]
    early = Checkpoints(model, (x, y), tmp_path / "early", every=100)
    with pytest.raises(CaptureError, match="no step yet"):
        early.on_finding({"step": None})
    early.on_finding(finding)  # before the loop reported a step: the finding's
    assert early.store.checkpoints == [6]
    for bad in ({}, {"every": 0}, {"every": 2, "steps": [1]}, {"steps": [-1]}, {"every": True}):
        with pytest.raises(CaptureError, match="every|steps"):
            Checkpoints(model, (x, y), tmp_path / "other", **bad)
    with pytest.raises(CaptureError, match="whole number"):
        checkpoints(-3)


def test_params_are_saved_as_safetensors_and_read_without_unpickling(tmp_path):
    model = net()
    x, y = data(32)
    checkpoints = Checkpoints(model, (x, y), tmp_path / "run", every=1, params=True)
    checkpoints(0)
    with torch.no_grad():
        model[0].weight += 1
    checkpoints(1)
    assert param_steps(tmp_path / "run") == [0, 1]
    first, second = load_params(tmp_path / "run", 0), load_params(tmp_path / "run", 1)
    assert isinstance(first["0.weight"], np.ndarray) and set(first) == set(model.state_dict())
    np.testing.assert_array_equal(second["0.weight"], model[0].weight.detach().numpy())
    np.testing.assert_allclose(second["0.weight"] - first["0.weight"], 1, rtol=1e-6)
    np.testing.assert_array_equal(second["1.running_mean"], model.state_dict()["1.running_mean"].numpy())
    assert torch.equal(load_params(tmp_path / "run", 1, tensors=True)["0.weight"], model[0].weight.detach())
    with pytest.raises(ParamsError, match=r"no parameters for step 5; the steps it holds: \[0, 1\]"):
        load_params(tmp_path / "run", 5)
    (tmp_path / "run" / "params" / "2.safetensors").write_bytes(b"\x80\x04not safetensors")  # a pickle header
    with pytest.raises(ParamsError, match="not a readable safetensors file"):
        load_params(tmp_path / "run", 2)


def test_capture_adds_checkpoints_and_refuses_other_instances_or_layers(tmp_path):
    model = net()
    x, y = data(64)
    path = tmp_path / "s"
    capture(model, x, path, labels=y, checkpoint=1, progress=False, layers=["1"])
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    with pytest.raises(CaptureTargetExistsError, match="Checkpoint 1 is already in .*written once"):
        capture(model, x, path, labels=y, checkpoint=1, progress=False)
    with pytest.raises(CaptureError, match=r"Cannot add checkpoint 2 .*layers \['1'\] vs \['4'\]"):
        capture(model, x, path, labels=y, checkpoint=2, progress=False, layers=["4"])
    with pytest.raises(CaptureError, match=r"Cannot add checkpoint 2 .*64 instances then, 63 now"):
        capture(model, x[:63], path, labels=y[:63], checkpoint=2, progress=False)
    with pytest.raises(CaptureError, match="holds other instances than the store.*not added"):
        capture(model, x.flip(0), path, labels=y.flip(0), checkpoint=2, progress=False)
    with pytest.raises(CaptureError, match="the same labels, other inputs.*not added"):
        capture(model, x + 1, path, labels=y, checkpoint=2, progress=False)
    with pytest.raises(CaptureError, match="nothing to resume"):
        capture(model, x, path, labels=y, checkpoint=2, progress=False, resume=True)
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
    with pytest.raises(CaptureError, match="checkpoint is the training step"):
        capture(model, x, path, labels=y, checkpoint=-1, progress=False)


def test_a_kill_in_the_middle_of_a_checkpoint_leaves_the_others_and_resumes(tmp_path):
    """The worker stalls inside checkpoint 2's capture once 48 rows are committed (a point in the capture's
    own progress, not a pause); it is killed there, and the checkpoint resumes to what an uninterrupted one
    writes."""
    run = tmp_path / "run"
    stall = tmp_path / "stalled"
    proc = subprocess.Popen([sys.executable, str(WORKER), "stall", str(run), str(stall)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not stall.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stall.exists(), proc.communicate()
        while open_store(run / "probe").at(2).n_instances < 48 and time.monotonic() < deadline:
            time.sleep(0.01)  # the writer thread commits the batches before the stall
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    store = open_store(run / "probe")
    assert store.checkpoints == [1] and store.unfinished_checkpoints == [2] and store.step == 1
    partial = store.at(2)
    assert partial.n_instances == 48 and "checkpoint=2, resume=True" in repr(partial)
    sys.path.insert(0, str(WORKER.parent))
    import checkpoint_worker as worker

    model = worker.model(2)
    Checkpoints(model, worker.Rows(), run, steps=[1, 2], batch_size=16)(2)  # resumes the unfinished one
    reference = capture(model, worker.Rows(), tmp_path / "ref", batch_size=16, progress=False, checkpoint=2)
    store = open_store(run / "probe")
    assert store.checkpoints == [1, 2] and store.at(2).capture_info["last_session_rows"] == 160 - 48
    for layer in reference.layers:
        np.testing.assert_array_equal(store.at(2).activations(layer), reference.activations(layer))


def test_dynamics_rows_survive_a_torn_tail_and_bad_input_is_refused(tmp_path):
    folder = tmp_path / "dynamics"
    writer = DynamicsWriter(folder)
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]], np.float32)
    writer.append(0, [4, 1], [0, 2], logits)
    writer.close()
    with open(folder / "rank-0.bin", "ab") as f:
        f.write(b"\x01\x02\x03")  # killed while writing a row
    with pytest.warns(RuntimeWarning, match="torn last row"):
        dyn = read_dynamics(folder)
    frame = dyn.frame()
    assert frame["instance"].tolist() == [4, 1] and frame["correct"].tolist() == [True, False]
    expected = -torch.log_softmax(torch.from_numpy(logits).double(), 1)[[0, 1], [0, 2]].numpy()
    np.testing.assert_allclose(frame["loss"], expected, rtol=1e-6)
    writer = DynamicsWriter(folder)  # a resumed run cuts the torn row off and goes on
    writer.append(1, [4], [0], logits[:1], losses=[0.5])
    with pytest.raises(DynamicsError, match="2 indices for 1 rows"):
        writer.append(2, [1, 2], [0], logits[:1])
    with pytest.raises(DynamicsError, match="label 3 is outside the 3 classes"):
        writer.append(2, [1], [3], logits[:1])
    with pytest.raises(DynamicsError, match="have 5 classes; the run.s dynamics have 3"):
        writer.append(2, [1], [0], np.zeros((1, 5)))
    with pytest.raises(DynamicsError, match="2-D"):
        writer.append(2, [1], [0], np.zeros(3))
    writer.close()
    assert (folder / "rank-0.bin").stat().st_size == 3 * row_dtype(3).itemsize
    dyn = read_dynamics(folder)
    assert dyn.frame()["step"].tolist() == [0, 0, 1] and dyn.frame()["loss"].iloc[2] == 0.5
    assert dyn.presentations().shape == (2, 5, 3) and np.isnan(dyn.presentations()[1, 1]).all()
    (folder / "meta.json").write_text(json.dumps({"format": "activis.dynamics", "version": 1, "classes": -2}))
    with pytest.raises(DynamicsError, match="'classes' is -2"):
        read_dynamics(folder)


def test_torchrun_ranks_record_their_own_dynamics_and_rank_0_captures(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(WORKER), "ddp",
                           str(tmp_path / "run")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "run" / "dynamics").iterdir()) == ["meta.json", "rank-0.bin",
                                                                                 "rank-1.bin"]
    dyn = read_dynamics(tmp_path / "run" / "dynamics")
    frame = dyn.frame()
    # 4 steps of 8 instances per rank: every instance of the 64 presented once, from one rank or the other
    assert len(frame) == 64 and sorted(frame["instance"]) == list(range(64))
    assert frame["step"].is_monotonic_increasing and dyn.presentations().shape == (1, 64, 4)
    store = open_store(tmp_path / "run" / "probe")
    assert store.checkpoints == [0, 2] and store.n_instances == 40


def test_torchrun_ranks_fill_each_checkpoint_of_one_store(tmp_path):
    """capture(..., checkpoint=) under torchrun: each rank writes its shard of every checkpoint."""
    from capture_worker import capture_rows

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    worker = WORKER.with_name("capture_worker.py")
    for step in (1, 2):
        proc = subprocess.run([str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(worker),
                               str(tmp_path / "sharded"), "--rows", "128", "--batch", "16", "--distributed",
                               "--checkpoint", str(step)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the ranks, so that the rows agree to the bit
    try:
        reference = capture_rows(tmp_path / "single", 128, 16)
    finally:
        torch.set_num_threads(threads)
    store = open_store(tmp_path / "sharded")
    assert store.checkpoints == [1, 2]
    assert sorted(p.name for p in (tmp_path / "sharded" / "checkpoints" / "2" / "shards").iterdir()) == ["0.json",
                                                                                                     "1.json"]
    for step in store.checkpoints:
        for layer in reference.layers:
            np.testing.assert_array_equal(store.at(step).activations(layer), reference.activations(layer))
        assert store.at(step).instances.equals(reference.instances)


def test_a_run_folder_reads_without_torch(tmp_path):
    """The probe store's checkpoints, the dynamics and the parameters open where torch cannot be imported."""
    model = net()
    x, y = data(32)
    checkpoints = Checkpoints(model, (x, y), tmp_path / "run", every=1, params=True)
    checkpoints(0)
    checkpoints(1)
    with DynamicsRecorder(tmp_path / "run") as recorder:
        recorder.record(0, torch.arange(4), model(x[:4]), y[:4])
    script = f"""
import importlib.abc, json, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sklearn", "scipy"):
            raise ImportError(name + " is blocked in this test")

sys.meta_path.insert(0, Blocked())
from activis import load_params, open_store, read_dynamics

run = {str(tmp_path / "run")!r}
store = open_store(run + "/probe")
out = {{"checkpoints": store.checkpoints, "outputs": list(store.at(0).outputs.shape),
        "dynamics": len(read_dynamics(run + "/dynamics").frame()), "params": sorted(load_params(run, 1))[:2],
        "blocked": [m for m in sys.modules if m.split(".")[0] in ("torch", "sklearn", "scipy")]}}
print("RESULT " + json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result == {"checkpoints": [0, 1], "outputs": [32, 4], "dynamics": 4, "params": ["0.bias", "0.weight"],
                      "blocked": []}


def test_damaged_dynamics_rows_are_skipped_and_no_index_allocates_without_bound(tmp_path):
    folder = tmp_path / "dynamics"
    with DynamicsWriter(folder, rank=1) as writer:
        writer.append(0, [0, 1], [0, 1], np.eye(2, dtype=np.float32))
    rows = np.fromfile(folder / "rank-1.bin", dtype=row_dtype(2))
    rows[1]["instance"] = -5
    extra = rows[:1].copy()
    extra["instance"] = 2**60
    np.concatenate([rows, extra]).tofile(folder / "rank-1.bin")
    with pytest.warns(RuntimeWarning, match="1 damaged rows"):
        dyn = read_dynamics(folder)
    assert dyn.frame()["instance"].tolist() == [0, 2**60]
    with pytest.raises(DynamicsError, match="over 16 GiB"):
        dyn.presentations()
    with pytest.raises(DynamicsError, match="more than the largest index"):
        dyn.labels(3)
