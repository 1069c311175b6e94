"""The wheel carries the JavaScript bundles and notebooks; `activis demo` serves the quickstart."""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_wheel_contains_bundles_and_notebooks(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    wheel = next(tmp_path.glob("activis-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    bundles = {n for n in names if n.startswith("activis/static/") and n.endswith(".js")}
    expected = {f"activis/static/{p.stem}.js" for p in (ROOT / "js").glob("*.js") if p.name != "build.mjs"}
    assert expected and expected <= bundles
    assert "activis/notebooks/quickstart.ipynb" in names
    # bundles are self-contained: no import from a CDN or any URL
    with zipfile.ZipFile(wheel) as zf:
        for name in bundles:
            text = zf.read(name).decode()
            assert not re.search(r"""(from|import)\s*\(?\s*["']https?://""", text), name


def test_bundles_never_reference_a_cdn():
    for bundle in (ROOT / "activis" / "static").glob("*.js"):
        text = bundle.read_text()
        for cdn in ("esm.sh", "unpkg.com", "jsdelivr", "cdnjs"):
            assert cdn not in text, f"{bundle.name} mentions {cdn}"


NODE_TRACE = re.compile(r"^\s+at .+:\d+:\d+\)?$|^Node\.js v\d", re.M)


def test_package_json_leaves_the_venvs_javascript_alone(tmp_path):
    """The venv lives in the repository (make setup): its .js files must not fall under our package.json's scope.

    A `"type": "module"` there made Node read JupyterLab's CommonJS yarn.js as an ES module, which printed
    a stack trace at every `activis demo` before the URL.
    """
    import jupyter_builder.jlpm

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    (tmp_path / "package.json").write_text((ROOT / "package.json").read_text())
    inside = tmp_path / ".venv" / "lib" / "site-packages" / "jupyter_builder"
    inside.mkdir(parents=True)
    shutil.copy(jupyter_builder.jlpm.YARN_PATH, inside / "yarn.js")
    run = subprocess.run([node, str(inside / "yarn.js"), "--version"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    assert run.returncode == 0 and not NODE_TRACE.search(run.stderr), run.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_command_serves_the_quickstart(tmp_path):
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    proc = subprocess.Popen([sys.executable, "-m", "activis", "demo", "--no-browser", "--dir", str(tmp_path / "demo"),
                             "--port", str(free_port()), "--ip", "127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        url, lines, deadline = None, [], time.time() + 300
        while time.time() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:  # the server exited
                break
            lines.append(line)
            match = re.search(r"(http://127\.0\.0\.1:\d+/lab[^\s]*token=\w+)", line)
            url = match.group(1) if match else None
        assert url, "".join(lines)
        # nothing alarming before the URL: no Node stack trace (JupyterLab runs yarn.js from the venv at start),
        # no warning from the training and capture
        printed = "".join(lines)
        assert not NODE_TRACE.search(printed) and "Fail to get yarn configuration" not in printed, printed
        assert not re.search(r"\w*Warning: ", printed), printed
        assert (tmp_path / "demo" / "quickstart.ipynb").exists()
        assert (tmp_path / "demo" / "digits.activis" / "manifest.json").exists()  # trained and captured first
        base, token = url.split("/lab")[0], url.split("token=")[1]
        for _ in range(50):  # the URL is printed a moment before the socket accepts
            try:
                with urllib.request.urlopen(f"{base}/api/contents/quickstart.ipynb?token={token}", timeout=10) as r:
                    assert json.loads(r.read())["type"] == "notebook"
                break
            except urllib.error.URLError:
                time.sleep(0.2)
        else:
            raise AssertionError(f"{base} never answered")
        with urllib.request.urlopen(f"{base}/lab/tree/quickstart.ipynb?token={token}", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("module", ["activis.store", "activis.run"])
def test_backend_imports_without_widgets_or_torch(module):
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('torch', 'anywidget', 'ipywidgets'):\n"
        "        raise ImportError('blocked ' + name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        f"import {module}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_public_name_resolves():
    import activis

    missing = [name for name in activis.__all__ if name != "__version__" and getattr(activis, name, None) is None]
    assert not missing
