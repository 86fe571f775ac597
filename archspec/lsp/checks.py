"""Checking the open specs off the event loop: one check at a time, each document's newest text
next, stale results dropped, a slow check told rather than waited for.

A check runs on a thread of its own, so the server keeps reading edits and answering hovers
while it runs. Edits that arrive meanwhile replace one another: only each document's newest text
waits its turn (twenty quick edits cost two checks, not twenty). When a check ends, its result is
kept only if its text is still the document's; then the next waiting text is checked.

Python cannot stop a thread, so a check that runs past `SLOW_AFTER` seconds goes on: the editor
is told (`slow`), nothing waits for it any more (hover and definition answer from the last
finished check), and its result is used when it ends if its text is still the newest. No second
check starts meanwhile: at most one runs, whatever the editor sends.

Everything here but the check itself runs on the event loop's thread; the check's thread hands
its result back with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable

SLOW_AFTER = 5.0  # seconds (a check stays within about a second at archspec's limits)


@dataclass(frozen=True)
class Snapshot:
    """One text of one open document, as the editor sent it."""

    uri: str
    path: str  # the file (diagnostics name it; `extends` is read relative to it)
    text: str
    version: int | None


class Checks:
    """The checks of the open documents: `submit` each new text, read `results`."""

    def __init__(self, check: Callable[[Snapshot], Any], checked: Callable[[Snapshot, Any], None],
                 failed: Callable[[Snapshot, Exception], None], slow: Callable[[Snapshot, float], None]):
        self._check = check  # checks a snapshot, on the check's thread
        self._checked = checked  # the result for a snapshot still current
        self._failed = failed  # the check of a current snapshot raised (a defect in archspec)
        self._slow = slow  # the check of a current snapshot has run past SLOW_AFTER (given) seconds
        self.newest: dict[str, Snapshot] = {}  # each document's newest text, checked or not
        self.results: dict[str, Any] = {}  # each document's last good result (maybe of an older text)
        self._finished: dict[str, str] = {}  # the text of each document's last finished check
        self._waiting: dict[str, Snapshot] = {}  # newest texts not started yet, oldest document first
        self._running: Snapshot | None = None
        self._ended: dict[str, asyncio.Event] = {}  # set when a document's check ends

    def submit(self, snapshot: Snapshot) -> None:
        self.newest[snapshot.uri] = snapshot
        self._waiting[snapshot.uri] = snapshot  # replaces an older text that has not started
        self._start_next()

    def forget(self, uri: str) -> None:
        """A document closed, or no spec any more: drop its texts and results."""
        for table in (self.newest, self.results, self._finished, self._waiting):
            table.pop(uri, None)
        self._wake(uri)

    def is_current(self, snapshot: Snapshot) -> bool:
        newest = self.newest.get(snapshot.uri)
        return newest is not None and newest.text == snapshot.text

    def pending(self, uri: str) -> bool:
        """Whether the document's newest text is still being checked, or waits to be."""
        return uri in self.newest and self._finished.get(uri) != self.newest[uri].text

    async def settled(self, uri: str, seconds: float) -> Any:
        """The document's last good result, after waiting up to `seconds` for the check of its
        newest text."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.pending(uri) and loop.time() < deadline:
            ended = self._ended.setdefault(uri, asyncio.Event())
            try:
                await asyncio.wait_for(ended.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break
        return self.results.get(uri)

    # -- the one running check -----------------------------------------------------------------------
    def _start_next(self) -> None:
        if self._running is not None or not self._waiting:
            return
        uri = next(iter(self._waiting))
        snapshot = self._running = self._waiting.pop(uri)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(SLOW_AFTER, self._overdue, snapshot, SLOW_AFTER)

        def run() -> None:
            try:
                outcome = self._check(snapshot)
            except Exception as exc:  # a defect: told on the document and in the log, never a dead server
                traceback.print_exc()
                outcome = exc
            try:
                loop.call_soon_threadsafe(self._end, snapshot, outcome, timer)
            except RuntimeError:  # the server has stopped meanwhile
                pass

        threading.Thread(target=run, name="archspec-check", daemon=True).start()

    def _overdue(self, snapshot: Snapshot, seconds: float) -> None:
        if self._running is snapshot and self.is_current(snapshot):
            self._slow(snapshot, seconds)

    def _end(self, snapshot: Snapshot, outcome: Any, timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        self._running = None
        if self.is_current(snapshot):  # else: stale, dropped (a newer text waits)
            self._finished[snapshot.uri] = snapshot.text
            if isinstance(outcome, Exception):
                self._failed(snapshot, outcome)
            else:
                self.results[snapshot.uri] = outcome
                self._checked(snapshot, outcome)
        self._wake(snapshot.uri)
        self._start_next()

    def _wake(self, uri: str) -> None:
        ended = self._ended.pop(uri, None)
        if ended is not None:
            ended.set()
