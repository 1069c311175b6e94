"""Views that follow training logs while they grow: throttled sends, and folders re-read on a timer.

A log a training loop in this kernel writes tells its subscribers of every new step; a log folder
another process writes is re-read every ``poll`` seconds. Either way the view's newest state reaches
the browser at most every ``throttle`` seconds: at once when the last send is older than that, else
once at the end of the window, so the last state always arrives even when training stops, and the
training loop is never held up for more than the send itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import traitlets

from ..run.log import CockpitLog
from ._base import View
from .errors import ViewError


def _seconds(name: str, value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ViewError(f"{name} is the seconds between {what}, 0 or more, not {value!r}.")
    return float(value)


def _written_elsewhere(log: CockpitLog) -> bool:
    """A folder this process reads but does not write: only re-reading it shows new steps."""
    return log.directory is not None and not log.writable


class LiveView(View):
    """Base of the views over logs that may still grow: they `_follow` their logs."""

    updates = traitlets.Int(0).tag(sync=True)  # how many times data was sent (live updates count)

    def _follow(self, logs: list[CockpitLog], state: Callable[[], dict], *, throttle: float, poll: float) -> None:
        """Set the traits ``state()`` returns now, then whenever any of ``logs`` grows (throttled), until `close`."""
        try:
            self.throttle = _seconds("throttle", throttle, "live updates")
            self.poll = _seconds("poll", poll, "reads of a log folder another process writes")
        except ViewError:
            self.close()  # nothing of a refused view stays open
            raise
        self._live_state = state
        self._lock = threading.Lock()
        self._last_push = 0.0
        self._timer: threading.Timer | None = None
        self._closed = threading.Event()
        self._push()
        self._unsubscribes = [log.subscribe(self._on_new_data) for log in logs]
        polled = [log for log in logs if _written_elsewhere(log)]
        if polled and self.poll > 0:
            threading.Thread(target=self._poll, args=(polled,), daemon=True, name="activis-poll").start()

    def close(self) -> None:
        if getattr(self, "_closed", None) is not None:
            self._closed.set()
            for unsubscribe in self._unsubscribes:
                unsubscribe()
            self._unsubscribes = []
            with self._lock:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        super().close()

    def _poll(self, logs: list[CockpitLog]) -> None:
        while not self._closed.wait(self.poll):
            for log in logs:
                try:
                    log.refresh()  # tells the subscribers (this view) when it read something
                except OSError:  # a folder moved or unreadable for a moment: try again next time
                    continue

    def _on_new_data(self, _log) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            wait = self._last_push + self.throttle - time.monotonic()
            if wait > 0:
                if self._timer is None:  # the last state always arrives, even when training stops
                    self._timer = threading.Timer(wait, self._push_later)
                    self._timer.daemon = True
                    self._timer.start()
                return
        self._push()

    def _push_later(self) -> None:
        with self._lock:
            self._timer = None
        if not self._closed.is_set():
            self._push()

    def _push(self) -> None:
        with self._lock:
            if self._timer is not None:  # this send carries the newest state already
                self._timer.cancel()
                self._timer = None
            self._last_push = time.monotonic()
            state = self._live_state()
        with self.hold_sync():
            for key, value in state.items():
                setattr(self, key, value)
            self.updates = self.updates + 1
