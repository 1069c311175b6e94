"""The cockpit notebook runs headless and reproduces the paper's two case studies numerically."""

import json
import pathlib

import nbformat
from nbclient import NotebookClient

NOTEBOOK = pathlib.Path(__file__).resolve().parent.parent / "notebooks" / "cockpit_debugging.ipynb"


def test_case_studies_show_their_effects():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    printed = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    result = json.loads(next(t for t in printed if t.startswith("RESULT ")).split("RESULT ", 1)[1])

    # 1. unnormalised inputs: the run fails quietly and its gradient histogram has mass in the clipped
    # edge bins (most of it early on); the normalised run trains and has none there
    good, bad = result["normalised"], result["unnormalised"]
    assert good["accuracy"] > bad["accuracy"] + 0.2
    assert good["edge_share"] < 1e-4 and good["edge_share_first_10_steps"] < 1e-4
    assert bad["edge_share"] > 1e-3 and bad["edge_share_first_10_steps"] > 1e-2

    # 2. sigmoid CNN: its first convolution's per-sample gradients are practically all zero, the ReLU
    # twin's are not; network-wide the sigmoid network does not look worse, which is why it takes
    # the layer-wise histograms to see it
    relu, sigmoid = result["cnn_relu"], result["cnn_sigmoid"]
    assert sigmoid["layers"]["1"] > 0.9 > 0.3 > relu["layers"]["1"]
    assert sigmoid["layers"]["3"] > 1.5 * relu["layers"]["3"]
    assert sigmoid["whole_network"] < relu["whole_network"]
    assert relu["accuracy"] > sigmoid["accuracy"] + 0.1
