"""SIGTERM handled as Ctrl-C is. `kill PID`, a scheduler's stop or a container's shutdown send SIGTERM, on which Python
ends on the spot: a fit would not say how to resume it, and a sweep would leave its runs going on without it, each
holding its folder's lock. Under `sigterm_as_interrupt` the signal raises `Terminated`, a KeyboardInterrupt, so every
path that handles Ctrl-C handles it too."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """The process was sent SIGTERM (raised by `sigterm_as_interrupt`'s handler)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises Terminated in the main thread; the previous handler is restored after it.
    Off the main thread (where Python allows no handler) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
