"""Shared test fixtures.

Browser tests (marked ``browser``) run in a real JupyterLab on 127.0.0.1 driven by Playwright in
Debian's headless Chromium: `lab` (one server per test session), `browser`, and `page` (a fresh
context whose `PageGuard` blocks and records every request and WebSocket that is not for the lab
server, and fails the test -- FAILED, in its call phase -- on any of those, on a page error, a
``console.error`` or a failed request). Notebook helpers are in ``jupyter_page.py``.
"""
import contextlib
import json
import os
import pathlib
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
ARTIFACTS = pathlib.Path(os.environ.get("ACTIVIS_TEST_ARTIFACTS",
                                      str(pathlib.Path(__file__).resolve().parent.parent / "test-artifacts")))
TIMINGS = {}


@pytest.fixture(autouse=True)
def _checkup_training_unbounded_by_the_clock(request, monkeypatch):
    """The checkup stops a training run on a copy after `train_seconds` of wall time and skips the check it
    served (10 s by default, for a user's notebook). With both cores busy that bound decides a test's result,
    so in the doctor's tests it is raised out of reach; tests that pass `train_seconds` keep their own."""
    if not request.node.module.__name__.split(".")[-1].startswith("test_doctor"):
        return
    from activis.doctor.checkup import checkup
    monkeypatch.setitem(checkup.__kwdefaults__, "train_seconds", 3600.0)


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
               "--LabApp.expose_app_in_browser=True",    # window.jupyterapp for waits
               "--JupyterNotebookApp.expose_app_in_browser=True"]  # the same in Notebook 7 (/notebooks/...)
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


@contextlib.contextmanager
def lab_page(root, *, width=1280, height=1000, timeout=120_000):
    """A JupyterLab serving ``root`` and one headless Chromium page on it, closed afterwards: for the
    benchmarks that measure in a page (the tests share one server and browser through fixtures)."""
    from playwright.sync_api import sync_playwright

    lab = Lab(root).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page(viewport={"width": width, "height": height})
                page.set_default_timeout(timeout)
                yield lab, page
            finally:
                browser.close()
    finally:
        lab.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # launch() makes a fresh temporary profile itself; passing --user-data-dir is refused
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield b
        b.close()


LOCAL_HOSTS = ("127.0.0.1", "localhost")


def is_local(url: str, port: int) -> bool:
    """Whether the page may load ``url``: the lab server itself (exact host and port), or data:/blob:.

    Parsed, not matched by prefix: ``http://127.0.0.1.example.com`` or ``http://127.0.0.1@evil.org``
    start like the server's address and go elsewhere.
    """
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):  # in memory; about:blank is every new page's first
        return True
    try:
        return parts.scheme in ("http", "ws") and parts.hostname in LOCAL_HOSTS and parts.port == port
    except ValueError:  # a malformed port
        return False


class PageGuard:
    """Blocks what leaves the lab server and records every problem a page shows only in its console.

    An anywidget that fails to load shows *nothing* in the notebook, only a console error, so each
    of these fails the test: a blocked request or WebSocket, a page error, a ``console.error``, a
    request that failed. `check` raises them in the test's call phase (see `pytest_runtest_call`).
    """

    def __init__(self, port: int):
        self.port = port
        self.log: list[str] = []       # everything, for the artifact
        self.problems: list[str] = []  # what fails the test
        self.blocked: list[str] = []
        self.frontend_bundle: str | None = None

    def forgive_frontend_errors(self, bundle: str) -> None:
        """Log, without failing, page errors raised wholly inside the front-end's own ``bundle`` (a path part of
        its script URLs), and its own static files that fail to load (a font aborted as the page moves on).
        Notebook 7.6 raises one such error on opening any notebook, with no activis code involved."""
        self.frontend_bundle = bundle

    def _frontend_own(self, url: str) -> bool:
        return bool(self.frontend_bundle) and self.frontend_bundle in (url or "")

    def _page_error(self, error) -> None:
        stack = error.stack or ""
        frames = re.findall(r"\((https?://[^)]+)\)", stack)
        if self.frontend_bundle and frames and all(self.frontend_bundle in f for f in frames):
            self.log.append(f"pageerror inside the front-end, forgiven: {error}\n{stack}")
        else:
            self._problem(f"pageerror: {error}\n{stack}")

    def attach(self, ctx, page) -> "PageGuard":
        self.page = page
        ctx.route("**/*", self._route)
        # WebSockets to the server are not routed (they stay direct); every other one reaches _route_ws
        local = "|".join(re.escape(h) for h in LOCAL_HOSTS)
        ctx.route_web_socket(re.compile(rf"^(?!ws://({local}):{self.port}/)"), self._route_ws)
        page.on("websocket", lambda ws: self.log.append(f"websocket: {ws.url}"))
        page.on("console", self._console)
        page.on("pageerror", self._page_error)
        page.on("requestfailed", self._request_failed)
        return self

    def _problem(self, line: str) -> None:
        self.log.append(line)
        self.problems.append(line)

    def _route(self, route) -> None:
        url = route.request.url
        if is_local(url, self.port):
            route.continue_()
        else:
            self.blocked.append(url)
            self._problem(f"blocked request: {url}")
            route.abort()

    def _route_ws(self, ws) -> None:
        if is_local(ws.url, self.port):
            ws.connect_to_server()
        else:
            self.blocked.append(ws.url)
            self._problem(f"blocked WebSocket: {ws.url}")
            ws.close()

    def _console(self, message) -> None:
        line = f"console.{message.type}: {message.text}"
        if message.type == "error" and self._frontend_own((message.location or {}).get("url", "")):
            self.log.append(f"{line} (the front-end's own file, forgiven)")
        elif message.type == "error":
            self._problem(line)
        else:
            self.log.append(line)

    def _request_failed(self, request) -> None:
        if self._frontend_own(request.url):
            self.log.append(f"requestfailed (the front-end's own file, forgiven): {request.url} {request.failure}")
        elif request.url not in self.blocked:  # a blocked one is reported as blocked
            self._problem(f"requestfailed: {request.url} {request.failure}")

    def check(self) -> None:
        try:
            self.page.evaluate("0")  # a round trip: events the page sent before now are delivered
        except Exception:  # the test closed its page
            pass
        if self.problems:
            pytest.fail("the page showed problems:\n" + "\n".join(self.problems), pytrace=False)


PAGE_GUARD = pytest.StashKey[PageGuard]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fail a browser test in its call phase on what its page's guard recorded (FAILED, not a teardown ERROR)."""
    guard = item.stash.get(PAGE_GUARD, None)
    try:
        result = yield
    except BaseException as error:
        if guard is not None and guard.problems:
            error.add_note("the page also showed:\n" + "\n".join(guard.problems))
        raise
    if guard is not None:
        guard.check()
    return result


@pytest.fixture
def page(browser, lab, request):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    guard = request.node.stash[PAGE_GUARD] = PageGuard(lab.port).attach(ctx, pg)
    yield pg
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{request.node.name}.console.txt").write_text("\n".join(guard.log))
    ctx.close()
    lab.shutdown_kernels()   # free the 2 cores for the next test
