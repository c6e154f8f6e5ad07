"""The thread pool sync jobs run in: daemon threads that never hold the process.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits,
so one job body that never returns keeps a stopped worker process alive until a
SIGKILL. A job a hard stop handed back (its row is ``available`` again) must not do
that. These threads are daemons and nothing joins them: they are reused while the pool
runs and end with the process.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["DaemonThreadPool"]

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """An executor that starts a daemon thread whenever no idle one is waiting.

    It has no upper bound of its own: the producer submits at most one job per free
    slot, and a bound here would queue new jobs behind a thread that never returns."""

    def __init__(self, thread_name_prefix: str) -> None:
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False):
                self._threads += 1
                threading.Thread(
                    target=self._serve, name=f"{self._prefix}-{self._threads}", daemon=True
                ).start()
        return future

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Idle threads end now, busy ones after their job; ``wait`` is not honoured
        (nothing here is ever joined)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in range(self._threads):
                self._work.put(None)
