"""Debouncing: events collected as they come, handed out as one batch once a burst has gone quiet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Debouncer(Generic[T]):
    """Collects events and hands them out in batches: when no event came for `quiet` seconds, or
    `max_latency` seconds after the batch's first event (so an endless stream still flushes).

    Besides events, a batch can be asked to be "full" (the consumer then reconciles everything,
    not only what the events name). One consumer takes batches with `wait`, and calls `finished`
    when it has handled one; `idle` is true when nothing is pending or being handled.

    Args:
        quiet: Seconds without an event that close a batch.
        max_latency: Longest wait, in seconds, from a batch's first event to its hand-out.
        cond: The condition variable guarding the state (share it to wait on other state with it);
            a new one by default. Every method takes it; `idle` expects the caller to hold it.
    """

    def __init__(self, quiet: float, max_latency: float, cond: threading.Condition | None = None) -> None:
        self.quiet = quiet
        self.max_latency = max(quiet, max_latency)
        self.cond = cond or threading.Condition()
        self.last_event = 0.0
        """`time.monotonic()` of the last event pushed (0 before any)."""
        self._events: list[T] = []
        self._full = False
        self._busy = False
        self._first_event = 0.0

    def push(self, event: T) -> None:
        """Add an event to the pending batch."""
        now = time.monotonic()
        with self.cond:
            if not self._events and not self._full:
                self._first_event = now
            self._events.append(event)
            self.last_event = now
            self.cond.notify_all()

    def push_full(self) -> None:
        """Ask for the pending batch to be a full one (due like an event pushed now)."""
        now = time.monotonic()
        with self.cond:
            if not self._events and not self._full:
                self._first_event = now
            self._full = True
            self.last_event = now
            self.cond.notify_all()

    def full_now(self) -> None:
        """Ask for a full batch, due at once."""
        with self.cond:
            self._full = True
            self._first_event = self.last_event = time.monotonic() - self.max_latency
            self.cond.notify_all()

    def wait(self, until: float, stopping: Callable[[], bool]) -> tuple[list[T], bool] | None:
        """Wait for a batch to be due and take it: (events, full).

        None when `stopping()` turns true, or at `until` (a `time.monotonic()` time) if nothing
        is pending by then; while something is pending the wait goes on until it is due.
        """
        with self.cond:
            while True:
                if stopping():
                    return None
                now = time.monotonic()
                if self._events or self._full:
                    due = min(self.last_event + self.quiet, self._first_event + self.max_latency)
                    if now >= due:
                        events, self._events = self._events, []
                        full, self._full = self._full, False
                        self._busy = True
                        return events, full
                    self.cond.wait(due - now)
                elif now >= until:
                    return None
                else:
                    self.cond.wait(until - now)

    def finished(self) -> None:
        """The batch taken last has been handled."""
        with self.cond:
            self._busy = False
            self.cond.notify_all()

    def put_back(self, events: list[T], full: bool, delay: float) -> None:
        """Return a batch that could not be handled, due again after `delay` seconds (new events bring it forward)."""
        with self.cond:
            due = time.monotonic() + delay
            self._events[:0] = events
            self._full = self._full or full
            self.last_event = max(self.last_event, due - self.quiet)
            self._first_event = due - self.max_latency
            self.cond.notify_all()

    def clear(self) -> None:
        """Drop the pending events (a full batch asked for stays asked for)."""
        with self.cond:
            self._events.clear()

    def idle(self) -> bool:
        """Nothing pending and no batch being handled (the caller holds `cond`)."""
        return not self._events and not self._full and not self._busy
