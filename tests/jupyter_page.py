"""Drive notebooks in the JupyterLab under test: write, open, run cells, read results."""

import json
import re
import time

import nbformat


def write_notebook(path, sources):
    nb = nbformat.v4.new_notebook()
    # kernelspec in metadata => JupyterLab starts the kernel without a "select kernel" dialog
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, str(path))


KERNEL_IDLE_JS = """() => {
  const app = window.jupyterapp; if (!app) return false;
  const w = app.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""


def open_notebook(page, lab, relpath, frontend="lab"):
    """Open a notebook in a reset workspace; return (panel locator, seconds until kernel idle).

    ``frontend="notebook"`` opens it in Notebook 7 (the same server serves both front-ends).
    """
    t0 = time.time()
    # ?reset: start from an empty workspace, otherwise notebooks opened by earlier tests are
    # restored as hidden panels and ".jp-NotebookPanel .jp-Cell" matches THEIR cells first.
    page.goto(lab.url(f"lab/tree/{relpath}", "reset") if frontend == "lab" else lab.url(f"notebooks/{relpath}"))
    page.wait_for_function(
        "(p) => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.context"
        " && window.jupyterapp.shell.currentWidget.context.path === p", arg=relpath)
    panel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    panel = page.locator(f"[id='{panel_id}']")
    panel.wait_for(state="visible")
    # NB: .jp-Notebook-ExecutionIndicator[data-status=idle] is ALREADY present while the
    # status bar says "No Kernel | Initializing" -> not a kernel-ready signal on its own.
    page.wait_for_function(KERNEL_IDLE_JS, timeout=90_000)
    return panel, time.time() - t0


def run_cell(panel, index, timeout=120_000):
    """Select cell `index` (via its prompt), press Shift+Enter, wait for a NEW "[n]:" prompt.

    A re-run cell already shows "[n]:", so waiting for any number would return at once with the
    previous output still on screen; wait for a number different from the one before.
    """
    cell = panel.locator(".jp-Notebook .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    old = re.search(r"\[(\d+)\]", prompt.inner_text())
    prompt.click()
    panel.page.keyboard.press("Shift+Enter")
    # prompt goes "[ ]:"/"[k]:" -> "[*]:" -> "[n]:"
    pat = rf"\[(?!{old.group(1)}\])\d+\]" if old else r"\[\d+\]"
    prompt.filter(has_text=re.compile(pat)).wait_for(timeout=timeout)
    return cell


def read_result(cell, timeout=60_000):
    """Parse the JSON a check cell printed after ``RESULT``.

    The output area can be re-rendered between finding the output and reading it (seen under
    load): read again until the text holds a result.
    """
    out = cell.locator(".jp-OutputArea-output").filter(has_text="RESULT")
    deadline = time.time() + timeout / 1000
    while True:
        out.wait_for(timeout=timeout)
        text = out.inner_text()
        if "RESULT" in text or time.time() > deadline:
            return json.loads(text.split("RESULT", 1)[1])
        time.sleep(0.1)


def python_result(panel, index, condition=lambda r: True, timeout=120.0, pause=0.2):
    """Re-run check cell ``index`` until ``condition(result)`` holds (browser -> kernel is async).

    The condition is what is waited for; ``timeout`` only guards against a hang, generous enough for a
    loaded machine. Raises AssertionError with the last result when it never held: a wait that returned
    the last value silently let callers that did not check it pass.
    """
    result, runs = None, 0
    deadline = time.monotonic() + timeout
    while True:
        result = read_result(run_cell(panel, index))
        runs += 1
        if condition(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"check cell {index}: condition never held in {runs} runs over {timeout:.0f} s; "
                                 f"last result: {result}")
        time.sleep(pause)


def open_cells(page, lab, name, sources, frontend="lab"):
    """Write a notebook of ``sources`` into the lab's root and open it; returns the panel."""
    write_notebook(lab.root_dir / name, sources)
    panel, _ = open_notebook(page, lab, name, frontend)
    return panel


def change_theme(page, dark: bool, timeout=30_000):
    """Switch JupyterLab's theme and wait until it is applied and its splash screen is gone.

    JupyterLab shows a splash while a theme loads and removes it 200 ms after; a second switch inside
    that window makes its own removal fail ("removeChild ... not a child of this node", a page error).
    """
    theme = "JupyterLab Dark" if dark else "JupyterLab Light"
    page.evaluate("(name) => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: name}); }", theme)
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{'false' if dark else 'true'}'",
                           timeout=timeout)
    page.wait_for_function("() => !document.getElementById('jupyterlab-splash')", timeout=timeout)


def train_live(page, panel, view, stop, until, timeout=90_000):
    """Run the notebook's second cell, a training loop that runs until the file ``stop`` exists; wait until
    ``until`` (a JS predicate of the view's element) holds while the cell still runs, then stop it.
    Returns the steps the loop reports. No race between the page and a fixed-length loop."""
    loop = panel.locator(".jp-Notebook .jp-Cell").nth(1)
    loop.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(until, arg=view.element_handle(), timeout=timeout)
    assert "[*]" in loop.locator(".jp-InputPrompt").inner_text()  # it arrived while the cell ran
    stop.touch()
    return read_result(loop, timeout=120_000)["steps"]
