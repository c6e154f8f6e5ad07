"""LISTEN on River's topics through one dedicated connection, with reconnects.

Subscribers register per topic (``river_insert``, ``river_control``,
``river_leadership``); payloads are parsed as JSON, never by string matching. While the
connection is down, producers keep polling; after a reconnect every subscriber is told
(``on_reconnect``) so it can fetch at once in case a notification was missed.

Connecting and LISTENing must answer within the call deadline, and while listening the
driver checks the connection after each deadline's worth of seconds (runtime/health.py):
a connection that went silent is found dead, dropped and replaced, instead of leaving
the client deaf for good.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from riverboat._channels import channel_name
from riverboat.drivers.base import AsyncDriver, call_deadline
from riverboat.errors import DriverError
from riverboat.runtime._waiting import backoff_delay, cancel_and_wait
from riverboat.runtime.health import DEFAULT_CALL_TIMEOUT, PathHealth, bounded

__all__ = ["TOPICS", "Notifier"]

log = logging.getLogger("riverboat.notifier")

# River's three, and riverboat_wait: job_wait announcements (riverboat.wait).
TOPICS = ("river_insert", "river_control", "river_leadership", "riverboat_wait")
Handler = Callable[[dict[str, Any]], None]


class Notifier:
    def __init__(
        self,
        driver: AsyncDriver,
        schema_name: str,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self._driver = driver
        self._call_timeout = call_timeout
        self.health = PathHealth("notifier", log)
        self._schema = schema_name
        self._handlers: dict[str, list[Handler]] = {topic: [] for topic in TOPICS}
        self._reconnect_handlers: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._listener: Any = None
        self.connected = asyncio.Event()
        self.reconnects = 0

    def channel(self, topic: str) -> str:
        return channel_name(self._schema, topic)

    def subscribe(self, topic: str, handler: Handler) -> None:
        self._handlers[topic].append(handler)

    def unsubscribe(self, topic: str, handler: Handler) -> None:
        if handler in self._handlers[topic]:
            self._handlers[topic].remove(handler)

    def on_reconnect(self, handler: Callable[[], None]) -> None:
        self._reconnect_handlers.append(handler)

    def off_reconnect(self, handler: Callable[[], None]) -> None:
        if handler in self._reconnect_handlers:
            self._reconnect_handlers.remove(handler)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="riverboat-notifier")

    async def _run(self) -> None:
        attempt = 0
        topic_by_channel = {self.channel(t): t for t in TOPICS}
        while True:
            try:
                async with bounded(self._call_timeout, "LISTEN"):
                    self._listener = await self._driver.listener()
                    for channel in topic_by_channel:
                        await self._listener.listen(channel)
                if attempt or self.reconnects:
                    for wake in self._reconnect_handlers:
                        wake()
                self.connected.set()
                attempt = 0
                self.health.ok()
                # Under the call deadline the driver checks a connection quiet for that
                # long and fails the iteration if it doesn't answer.
                with call_deadline(self._call_timeout):
                    async for note in self._listener.notifications():
                        self._dispatch(topic_by_channel, note)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the listener must outlive any failure
                # DriverError and OSError are expected (a dropped connection); anything
                # else is a bug in a driver, but a dead notifier would silently leave
                # producers on polling and stop() re-raising it, so reconnect all the same.
                if not isinstance(exc, (DriverError, OSError)):
                    log.exception("notifier: unexpected error from the listener")
                self.connected.clear()
                delay = backoff_delay(attempt + 1, 1.0, 30.0)
                attempt += 1
                self.reconnects += 1
                self.health.failed(exc, f"LISTEN connection lost, reconnecting in {delay:.1f}s")
                await self._close_listener(lost=True)
                await asyncio.sleep(delay)
            else:
                # The notification stream ended without an error: the connection closed.
                self.connected.clear()
                await self._close_listener(lost=True)
                self.reconnects += 1
                await asyncio.sleep(0.1)

    def _dispatch(self, topic_by_channel: dict[str, str], note: Any) -> None:
        topic = topic_by_channel.get(note.channel)
        if topic is None:
            return
        try:
            payload = json.loads(note.payload)
        except ValueError:
            log.warning("ignoring a non-JSON notification on %s", note.channel)
            return
        if not isinstance(payload, dict):
            return
        for handler in self._handlers[topic]:
            try:
                handler(payload)
            except Exception:  # one handler's bug must not drop the connection
                log.exception("notifier: a handler for %s failed", topic)

    async def _close_listener(self, *, lost: bool = False) -> None:
        """Close the LISTEN connection. A failure is logged with its traceback: at DEBUG
        when the connection was already lost (closing a dead one often fails, and the
        loss itself was logged), else as a WARNING."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                await listener.close()
            except Exception:
                log.log(
                    logging.DEBUG if lost else logging.WARNING,
                    "notifier: closing the listener failed",
                    exc_info=True,
                )

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        await self._close_listener()
