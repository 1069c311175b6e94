"""Command line: ``activis demo`` opens the quickstart notebook in JupyterLab."""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys


def notebooks_dir() -> pathlib.Path:
    """The bundled notebooks: beside the package in a wheel, at the repository root in a checkout."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "notebooks", here.parent / "notebooks"):
        if (candidate / "quickstart.ipynb").exists():
            return candidate
    raise FileNotFoundError("The activis notebooks are missing from this installation.")


def prepare_demo(workdir: pathlib.Path) -> pathlib.Path:
    """Copy the notebooks into ``workdir`` (never overwriting the user's edits); returns the quickstart."""
    workdir.mkdir(parents=True, exist_ok=True)
    for nb in sorted(notebooks_dir().glob("*.ipynb")):
        target = workdir / nb.name
        if not target.exists():
            shutil.copy(nb, target)
    return workdir / "quickstart.ipynb"


def demo(args) -> int:
    workdir = pathlib.Path(args.dir).resolve()
    quickstart = prepare_demo(workdir)
    print(f"activis demo: notebooks in {workdir}", flush=True)
    print("activis demo: loading PyTorch…", flush=True)
    from .demo import digits_store

    _, store = digits_store(workdir / "digits.activis")  # trains once; the quickstart loads what it saved
    print(f"activis demo: {store!r}", flush=True)
    print(f"activis demo: starting JupyterLab on {quickstart.name} (Ctrl-C stops it)…", flush=True)
    # the URL JupyterLab prints and opens lands on the quickstart, not on the Launcher
    landing = f"/lab/tree/{quickstart.name}"
    cmd = [sys.executable, "-m", "jupyterlab", quickstart.name, f"--ServerApp.root_dir={workdir}",
           f"--ServerApp.default_url={landing}", f"--LabApp.default_url={landing}",
           f"--port={args.port}", "--ServerApp.port_retries=50"]
    if args.no_browser:
        cmd.append("--no-browser")  # JupyterLab prints the URL (with its token) to open by hand
    if args.ip:
        cmd.append(f"--ip={args.ip}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI machines run as root
    os.chdir(workdir)
    sys.stdout.flush()
    os.execv(sys.executable, cmd)  # become the server: signals and Ctrl-C reach JupyterLab itself


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="activis", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="open the quickstart notebook (digits CNN) in JupyterLab")
    p.add_argument("--dir", default="activis-demo", help="working folder for the notebooks and stores")
    p.add_argument("--no-browser", action="store_true", help="print the URL instead of opening a browser")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--ip", default=None, help="address to listen on (default: JupyterLab's, localhost)")
    args = parser.parse_args(argv)
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
