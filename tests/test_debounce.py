"""The watcher's debouncer: a burst becomes one batch once quiet, an endless stream still flushes, a batch put back waits."""

from __future__ import annotations

import threading
import time

from explorer.engine.debounce import Debouncer


def _consumer(deb: Debouncer[int], out: list[tuple[float, list[int], bool]], stop: threading.Event):
    def run() -> None:
        while not stop.is_set():
            taken = deb.wait(time.monotonic() + 0.05, stop.is_set)
            if taken is not None:
                out.append((time.monotonic(), *taken))
                deb.finished()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _wait_for(cond, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


def test_a_burst_is_one_batch_after_the_quiet_period() -> None:
    deb: Debouncer[int] = Debouncer(quiet=0.15, max_latency=5.0)
    out: list[tuple[float, list[int], bool]] = []
    stop = threading.Event()
    thread = _consumer(deb, out, stop)
    try:
        last = 0.0
        for i in range(5):
            deb.push(i)
            last = time.monotonic()
            time.sleep(0.02)
        assert _wait_for(lambda: bool(out))
        at, events, full = out[0]
        assert events == [0, 1, 2, 3, 4] and not full
        assert at - last >= 0.14  # not before the burst went quiet (a lower bound: load only delays)
        assert _wait_for(lambda: _idle(deb))
    finally:
        stop.set()
        thread.join(5)


def test_an_endless_stream_flushes_at_the_latency_cap() -> None:
    deb: Debouncer[int] = Debouncer(quiet=0.2, max_latency=0.3)
    out: list[tuple[float, list[int], bool]] = []
    stop = threading.Event()
    thread = _consumer(deb, out, stop)
    try:
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < 1.0:  # never quiet for 0.2 s
            deb.push(i)
            i += 1
            time.sleep(0.02)
        assert len(out) >= 2  # flushed while events kept coming
        assert sum(len(events) for _t, events, _f in out) <= i
    finally:
        stop.set()
        thread.join(5)


def test_full_batches_and_a_batch_put_back() -> None:
    deb: Debouncer[int] = Debouncer(quiet=0.05, max_latency=1.0)
    deb.full_now()
    taken = deb.wait(time.monotonic() + 1.0, lambda: False)
    assert taken == ([], True)  # due at once
    with deb.cond:
        assert not deb.idle()  # taken, not finished
    deb.finished()
    deb.push(7)
    events, full = deb.wait(time.monotonic() + 1.0, lambda: False) or ([], False)
    assert events == [7] and not full
    deb.put_back(events, True, delay=0.3)  # failed: due again after the delay
    deb.finished()
    t0 = time.monotonic()
    again = deb.wait(time.monotonic() + 2.0, lambda: False)
    assert again == ([7], True) and time.monotonic() - t0 >= 0.25
    deb.finished()
    assert deb.wait(time.monotonic() + 0.05, lambda: False) is None  # nothing pending: times out
    deb.push(1)
    deb.clear()
    assert _idle(deb)
    assert deb.wait(time.monotonic() + 1.0, lambda: True) is None  # stopping


def _idle(deb: Debouncer[int]) -> bool:
    with deb.cond:
        return deb.idle()
