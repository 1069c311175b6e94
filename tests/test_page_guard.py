"""The browser tests' page guard: what it lets through, and that each problem fails a test as FAILED.

The guard's own check runs a small suite of browser tests in a second pytest (their page is served by
a plain HTTP server standing in for JupyterLab) and reads its JUnit report: each test whose page
misbehaves must be a *failure* naming the problem, never a pass or a teardown error.
"""

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from conftest import is_local

PORT = 8888


@pytest.mark.parametrize("url", [
    f"http://127.0.0.1:{PORT}/lab?token=x", f"http://localhost:{PORT}/api/kernels", f"ws://127.0.0.1:{PORT}/api/x",
    "data:text/plain,hi", "blob:http://127.0.0.1:8888/0b1c", "about:blank",
])
def test_the_lab_server_and_in_memory_urls_are_local(url):
    assert is_local(url, PORT)


@pytest.mark.parametrize("url", [
    f"http://127.0.0.1.example.com:{PORT}/", f"http://127.0.0.1:{PORT}@example.com/", f"http://127.0.0.1:{PORT + 1}/",
    "http://127.0.0.1/", f"https://127.0.0.1:{PORT}/", f"ws://127.0.0.1.example.com:{PORT}/", f"ws://example.com:{PORT}/",
    "https://cdn.jsdelivr.net/npm/vega@5", f"http://localhost.example.org:{PORT}/", "http://127.0.0.1:99999999/",
    "file:///etc/passwd", f"ftp://127.0.0.1:{PORT}/",
])
def test_lookalike_hosts_other_ports_and_schemes_are_not(url):
    assert not is_local(url, PORT)


INNER_CONFTEST = '''
import http.server, importlib.util, socket, threading, types
import pytest

spec = importlib.util.spec_from_file_location("activis_browser_fixtures", {conftest!r})
fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixtures)
browser, page, pytest_runtest_call = fixtures.browser, fixtures.page, fixtures.pytest_runtest_call


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/drop":  # no response at all: the request fails
            self.close_connection = True
            return
        body = b"<!doctype html><title>guard</title><p>hello</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def lab():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    yield types.SimpleNamespace(port=port, base=f"http://127.0.0.1:{{port}}", shutdown_kernels=lambda: None)
    server.shutdown()
'''

INNER_TESTS = '''
def open_page(page, lab):
    page.goto(lab.base + "/")
    assert page.locator("p").inner_text() == "hello"


def test_clean_page_passes(page, lab):
    open_page(page, lab)
    page.evaluate("() => fetch('/ok').then((r) => r.text())")


def test_lookalike_host(page, lab):
    open_page(page, lab)
    page.evaluate("(port) => fetch(`http://127.0.0.1.example.com:${port}/x`).catch(() => 0)", lab.port)


def test_other_local_port(page, lab):
    open_page(page, lab)
    page.evaluate("(port) => fetch(`http://127.0.0.1:${port + 1}/x`).catch(() => 0)", lab.port)


def test_websocket_elsewhere(page, lab):
    open_page(page, lab)
    page.evaluate("""() => new Promise((done) => {
        const ws = new WebSocket("ws://example.com/socket");
        ws.onclose = ws.onerror = () => done(0);
        setTimeout(done, 10000);
    })""")


def test_console_error(page, lab):
    open_page(page, lab)
    page.evaluate("() => console.error('the widget failed to load')")


def test_failed_request(page, lab):
    open_page(page, lab)
    page.evaluate("() => fetch('/drop').catch(() => 0)")


def test_page_error(page, lab):
    open_page(page, lab)
    page.evaluate("() => new Promise((done) => setTimeout(() => { done(0); throw new Error('uncaught in a view'); }))")
    page.wait_for_timeout(100)
'''

# inner test -> what its failure message must name
EXPECTED = {
    "test_lookalike_host": "blocked request: http://127.0.0.1.example.com",
    "test_other_local_port": "blocked request: http://127.0.0.1:",
    "test_websocket_elsewhere": "blocked WebSocket: ws://example.com/socket",
    "test_console_error": "console.error: the widget failed to load",
    "test_failed_request": "requestfailed: http://127.0.0.1:",
    "test_page_error": "pageerror: uncaught in a view",
}


@pytest.mark.browser
def test_each_problem_a_page_shows_fails_its_test_as_failed(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    conftest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conftest.py")
    (suite / "conftest.py").write_text(INNER_CONFTEST.format(conftest=conftest))
    (suite / "test_inner.py").write_text(textwrap.dedent(INNER_TESTS))
    report = tmp_path / "report.xml"
    env = {**os.environ, "ACTIVIS_TEST_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
                           f"--junitxml={report}", str(suite)], cwd=suite, env=env, capture_output=True, text=True,
                          timeout=300)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [child for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = (kinds[0].tag, kinds[0].get("message", "") + (kinds[0].text or "")) if kinds \
            else ("passed", "")
    assert outcomes.pop("test_clean_page_passes") == ("passed", ""), proc.stdout[-3000:]
    assert sorted(outcomes) == sorted(EXPECTED), proc.stdout[-3000:]
    for name, needle in EXPECTED.items():
        kind, message = outcomes[name]
        assert kind == "failure", (name, kind, message)  # FAILED in the call phase, not an ERROR at teardown
        assert needle in message, (name, message)
