"""run.data_map(): the data map of a run over its probe checkpoints or over the training loop's recorded logits."""

import numpy as np
import pytest

import activis
from activis.run import RunError


def test_data_map_of_a_run_from_checkpoints_and_from_training(tmp_path):
    rng = np.random.default_rng(0)
    n, classes = 30, 3
    labels = np.arange(n) % classes
    run = activis.Run.create(tmp_path / "run")
    with pytest.raises(RunError, match="no probe store"):
        run.data_map()
    with pytest.raises(RunError, match="no recorded dynamics"):
        run.data_map("training")
    with pytest.raises(RunError, match="choose 'checkpoints' or 'training'"):
        run.data_map("epochs")
    steps = [0, 5, 10]
    logits = rng.normal(size=(len(steps), n, classes)).astype(np.float32)
    for step, out in zip(steps, logits):
        activis.write_store(tmp_path / "run" / "probe", {"h": out}, labels=labels, outputs=out, checkpoint=step)
    expected = activis.data_map(logits, labels)
    got = activis.open_run(tmp_path / "run").data_map()
    np.testing.assert_allclose(got["confidence"], expected["confidence"], rtol=1e-6)
    assert got["forgetting"].tolist() == expected["forgetting"].tolist()

    # two presentations of every instance; instance 0 a third time (judged on the two all had)
    with activis.DynamicsRecorder(tmp_path / "run") as recorder:
        seen = rng.normal(size=(2, n, classes)).astype(np.float32)
        for epoch in range(2):
            recorder.record(epoch, np.arange(n), seen[epoch], labels)
        recorder.record(2, [0], rng.normal(size=(1, classes)).astype(np.float32), labels[:1])
    frame = activis.open_run(tmp_path / "run").data_map("training")
    reference = activis.data_map(seen, labels)
    assert frame.index.tolist() == list(range(n))
    np.testing.assert_allclose(frame["confidence"], reference["confidence"], rtol=1e-6)
