"""The TensorBoard plugin "rnnprof": beside the profile plugin, each run of the logdir with its audit's findings,
its time per step, its memory over time and its critical path's shares.

It reads the run directories under the logdir (``runs``) with ``rnnprof.open`` and serves each run's summary as
the HTML a notebook shows (``RunSummary._repr_html_``: the same code, the charts drawn as SVG on the server), so
nothing loads from the network. Routes, under ``/data/plugin/rnnprof/``: ``index.js`` (the tab: a run selector
and the selected run's page), ``runs`` (the runs, as paths relative to the logdir, JSON) and ``run?name=RUN`` (a
run's page). A run's page is made once and kept until its manifest changes.
"""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from rnnprof import rundir
from rnnprof.api import open as open_run
from rnnprof.errors import RnnprofError
from rnnprof.reports.html import esc

PLUGIN_NAME = "rnnprof"
MAX_DEPTH = 4  # folders below the logdir searched for run directories


def runs(logdir: Path) -> list[Path]:
    """The run directories under ``logdir`` (itself included), at most ``MAX_DEPTH`` folders down, sorted."""
    found, level = [], [logdir]
    for _ in range(MAX_DEPTH + 1):
        found += [p for p in level if rundir.is_run_dir(p)]
        level = sorted(c for p in level if not rundir.is_run_dir(p) and p.is_dir() for c in p.iterdir() if c.is_dir())
    return sorted(found)


def tab_page(path: Path) -> str:
    """A run's page: its summary's HTML, or the one-line error that says why it has none."""
    try:
        return open_run(path).summary()._repr_html_()
    except RnnprofError as exc:
        return f"<p class=\"missing\">{esc(exc)}</p>"


class RnnprofPlugin(base_plugin.TBPlugin):
    """rnnprof's TensorBoard plugin, built by TensorBoard with its context (the logdir)."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self.logdir = Path(context.logdir or ".").expanduser()
        self._pages: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def get_plugin_apps(self):
        return {"/index.js": self._index_js, "/runs": self._runs, "/run": self._run}

    def is_active(self) -> bool:
        return bool(runs(self.logdir))

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="rnnprof")

    def _names(self) -> dict[str, Path]:
        return {(p.relative_to(self.logdir).as_posix() if p != self.logdir else "."): p for p in runs(self.logdir)}

    @wrappers.Request.application
    def _index_js(self, request):
        script = resources.files(__package__).joinpath("index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, script, "application/javascript")

    @wrappers.Request.application
    def _runs(self, request):
        return http_util.Respond(request, sorted(self._names()), "application/json")

    @wrappers.Request.application
    def _run(self, request):
        path = self._names().get(request.args.get("name", ""))
        if path is None:
            return http_util.Respond(request, f"no run named {request.args.get('name', '')!r} in {self.logdir}",
                                     "text/plain", code=404)
        stamp = (path / rundir.MANIFEST).stat().st_mtime
        with self._lock:  # one page made at a time: each reads a run's traces
            kept = self._pages.get(str(path))
            if kept is None or kept[0] != stamp:
                kept = self._pages[str(path)] = (stamp, tab_page(path))
        return http_util.Respond(request, kept[1], "text/html")

