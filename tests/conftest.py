"""Shared test fixtures.

Browser tests (marked ``browser``) run in a real JupyterLab on 127.0.0.1 driven by Playwright in
Debian's headless Chromium: `lab` (one server per test session), `browser`, and `page` (a fresh
context that blocks and records every request leaving 127.0.0.1, and fails the test on a page
error or an attempted external request). Notebook helpers are in ``jupyter_page.py``.
"""
import json
import os
import pathlib
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
ARTIFACTS = pathlib.Path(os.environ.get("ACTIVIS_TEST_ARTIFACTS",
                                      str(pathlib.Path(__file__).resolve().parent.parent / "test-artifacts")))
TIMINGS = {}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, root_dir):
        self.root_dir = pathlib.Path(root_dir)
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.home = pathlib.Path(tempfile.mkdtemp(prefix="labhome-"))
        self.log_path = ARTIFACTS / "jupyterlab.log"
        self.proc = None

    def start(self, timeout=90):
        env = dict(os.environ)
        env["JUPYTER_CONFIG_DIR"] = str(self.home / "config")        # ignore ~/.jupyter
        env["JUPYTER_RUNTIME_DIR"] = str(self.home / "runtime")
        env["JUPYTERLAB_WORKSPACES_DIR"] = str(self.home / "workspaces")  # no restored layout
        settings = self.home / "user-settings"
        env["JUPYTERLAB_SETTINGS_DIR"] = str(settings)
        # silence the "get notified about Jupyter news?" toast (it can cover widgets)
        p = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
               "--ip=127.0.0.1", f"--port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root_dir}",
               "--ServerApp.allow_root=True",            # CI runs as root
               "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.expose_app_in_browser=True"]    # window.jupyterapp for waits
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        t0 = time.time()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = t0 + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited rc={self.proc.returncode}; log: {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}", timeout=2) as r:
                    if r.status == 200:
                        TIMINGS["lab_server_ready_s"] = round(time.time() - t0, 2)
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"jupyter lab not ready after {timeout}s; log: {self.log_path}")

    def url(self, path, *query):
        return f"{self.base}/{path.lstrip('/')}?" + "&".join(list(query) + [f"token={self.token}"])

    def api(self, method, path):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self):
        for k in self.api("GET", "/api/kernels"):
            try:
                self.api("DELETE", f"/api/kernels/{k['id']}")
            except urllib.error.HTTPError as e:
                # seen with jupyter_client 8.10.0 after a UI "restart kernel": 500
                # InvalidStateError in MultiKernelManager._async_shutdown_kernel
                print(f"warning: DELETE kernel {k['id']} -> HTTP {e.code}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        clean = False
        try:  # clean shutdown also stops the kernels it started
            self.api("POST", "/api/shutdown")
            clean = True
        except OSError as e:  # HTTPError 500 if a kernel restart is in flight (see shutdown_kernels)
            print(f"warning: /api/shutdown failed: {e}")
        try:
            self.proc.wait(20 if clean else 0.1)
        except subprocess.TimeoutExpired:
            self.proc.terminate()  # SIGTERM to the PID we started; the server then stops its kernels
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory):
    return tmp_path_factory.mktemp("lab_root")


@pytest.fixture(scope="session")
def lab(lab_root):
    TIMINGS["session_start"] = time.time()
    server = Lab(lab_root).start()
    yield server
    server.stop()
    TIMINGS["session_total_s"] = round(time.time() - TIMINGS.pop("session_start"), 2)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(TIMINGS, indent=2))


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # launch() makes a fresh temporary profile itself; passing --user-data-dir is refused
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, lab, request):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    logs = []
    pg.on("console", lambda m: logs.append(f"console.{m.type}: {m.text}"))
    pg.on("pageerror", lambda e: logs.append(f"pageerror: {e}\n{e.stack}"))
    pg.on("requestfailed", lambda r: logs.append(f"requestfailed: {r.url} {r.failure}"))
    pg.console_log = logs
    # Enforce "no network but the local Jupyter server" and record what tried to leave.
    blocked = []

    def _route(route):
        url = route.request.url
        if url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()
    ctx.route("**/*", _route)
    pg.blocked = blocked
    yield pg
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{request.node.name}.console.txt").write_text(
        "\n".join(logs + [f"BLOCKED external request: {u}" for u in blocked]))
    ctx.close()
    lab.shutdown_kernels()   # free the 2 cores for the next test
    errors = [line for line in logs if line.startswith("pageerror")]
    assert not blocked, f"requests tried to leave 127.0.0.1: {blocked}"
    assert not errors, f"page errors: {errors}"


