"""The thread pool sync jobs run in: daemon threads that never hold the process.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits,
so one job body that never returns keeps a stopped worker process alive until a
SIGKILL. A job a hard stop handed back (its row is ``available`` again) must not do
that. These threads are daemons and nothing joins them: they are reused while the pool
runs and end with the process.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["AFTER_SYNC_JOB", "DaemonThreadPool", "awaitable_error", "call_then_release"]

log = logging.getLogger("riverboat.executor")

# Called in the pool thread after each piece of user code riverboat runs there (a sync
# job, a periodic job's sync constructor), whatever it did: the place to hand back
# thread-bound resources (riverboat.contrib.django closes the thread's Django
# connections here). A hook's exception is logged, never the call's outcome.
AFTER_SYNC_JOB: list[Callable[[], None]] = []


def call_then_release(fn: Callable[..., Any], /, *args: Any) -> Any:
    """``fn(*args)``, then every :data:`AFTER_SYNC_JOB` hook (on a pool thread)."""
    try:
        return fn(*args)
    finally:
        for hook in AFTER_SYNC_JOB:
            try:
                hook()
            except Exception:
                log.exception("after_sync_job hook %r failed", hook)


def awaitable_error(error: BaseException) -> BaseException:
    """``error``, raised by a call on a pool thread, as its awaiting task may raise it. A
    future refuses StopIteration as such (a coroutine may not raise it either);
    GeneratorExit, set on one, ended the awaiting task unseen (the job's row left
    running). Both become a RuntimeError caused by them."""
    if isinstance(error, StopIteration | GeneratorExit):
        wrapped = RuntimeError(f"the job raised {error!r}")
        wrapped.__cause__ = error
        return wrapped
    return error


_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]
# A job for run(): the asyncio future its outcome goes to, and the call.
_LoopItem = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


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
        # run()'s outcomes waiting for the event loop, handed over in one wake-up per
        # batch: (future, raised, value).
        self._done: list[tuple[asyncio.Future[Any], bool, Any]] = []
        self._done_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._put((future, fn, args, kwargs))
        return future

    def run(self, fn: Callable[..., Any], /, *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on a pool thread, its outcome in an asyncio future of the running
        loop (one pool serves one loop). Unlike ``loop.run_in_executor``, outcomes that
        land while the loop is busy reach it in one wake-up, not one each, and no
        ``concurrent.futures.Future`` is made per call. A call whose future was
        cancelled before a thread took it up does not run."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._put((future, fn, args))
        return future

    def _put(self, item: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._work.put(item)
            if not self._idle.acquire(blocking=False):
                self._threads += 1
                threading.Thread(
                    target=self._serve, name=f"{self._prefix}-{self._threads}", daemon=True
                ).start()

    def _finish(self, future: asyncio.Future[Any], raised: bool, value: Any) -> None:
        """From a pool thread: queue an outcome, waking the loop if none was queued."""
        with self._done_lock:
            first = not self._done
            self._done.append((future, raised, value))
        if first:
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody awaits the outcome
                pass

    def _deliver(self) -> None:
        with self._done_lock:
            done, self._done = self._done, []
        for future, raised, value in done:
            if future.done():  # cancelled while the call ran
                continue
            if raised:
                future.set_exception(awaitable_error(value))
            else:
                future.set_result(value)

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            if len(item) == 3:  # run(): an asyncio future's call
                loop_future, call, call_args = item
                del item
                if not loop_future.cancelled():
                    try:
                        result = call(*call_args)
                    except BaseException as exc:
                        self._finish(loop_future, True, exc)
                    else:
                        self._finish(loop_future, False, result)
                del loop_future, call, call_args
                self._idle.release()
                continue
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
