"""The t-SNE child process: ``python tsne_child.py tsne FOLDER PARAMS``; imports nothing from activis."""

import json
import os
import pathlib
import sys


def _tsne_child_main(folder: str, params_json: str) -> None:
    import inspect

    import numpy as np  # imported here, after __main__ has cleaned sys.path
    from sklearn.manifold import TSNE

    folder_path = pathlib.Path(folder)
    p = json.loads(params_json)
    x = np.load(folder_path / "input.npy", allow_pickle=False)
    init = np.load(folder_path / "init.npy", allow_pickle=False)
    # scikit-learn < 1.5 calls max_iter n_iter
    iterations = "max_iter" if "max_iter" in inspect.signature(TSNE).parameters else "n_iter"
    layout = TSNE(n_components=2, perplexity=p["perplexity"], early_exaggeration=p["early_exaggeration"],
                  init=init, learning_rate="auto", random_state=p["random_state"], verbose=2,
                  **{iterations: p["max_iter"]}).fit_transform(x)
    np.save(folder_path / "output.npy", layout.astype(np.float32))


if __name__ == "__main__":  # the t-SNE child process: python tsne_child.py tsne FOLDER PARAMS
    # run as a script, so that the child imports neither activis nor its dependencies; drop this
    # file's folder from the path so that activis's own module names cannot shadow others
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    if len(sys.argv) != 4 or sys.argv[1] != "tsne":
        sys.exit("usage: tsne_child.py tsne FOLDER PARAMS_JSON")
    _tsne_child_main(sys.argv[2], sys.argv[3])
