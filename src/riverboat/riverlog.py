"""Per-attempt job logs stored on the job, as River's ``riverlog`` middleware stores them.

Add :class:`RiverLog` to the client's (or a worker's) ``middleware``; whatever a job logs
through :mod:`logging` while an attempt runs (its work function, the code it calls, on
the event loop or in its worker thread) is collected and written with the attempt's
outcome into ``metadata["river:log"]``: a list with one ``{"attempt": n, "log": "..."}``
entry per attempt, River's shape, so River UI shows it under the job.

River's caps apply: an attempt's log is cut to ``max_size_bytes`` (2 MB); when the whole
list would pass ``max_total_bytes`` (8 MB, at most 64 MB), the oldest entries are dropped
first, the newest always kept. Records are captured by a handler on the root logger that
only keeps records made inside an attempt (a context variable tells them apart), so a
logger must let the record through to the root: its level (``logging.basicConfig(level=
logging.INFO)``, say) decides what is captured, as it decides what is printed.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from riverboat._json import go_json_storable, storable_text
from riverboat.errors import InvalidInputError
from riverboat.runtime.worker import Job

__all__ = ["METADATA_KEY", "RiverLog", "append_with_cap"]

METADATA_KEY = "river:log"
MAX_SIZE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 8 * 1024 * 1024
MAX_TOTAL_BYTES_CEILING = 64 * 1024 * 1024

log = logging.getLogger("riverboat.riverlog")


class _Capture:
    """One attempt's lines, kept only up to the per-attempt cap: what is stored is the
    log's first ``limit`` bytes, so the lines past them are counted, not held (a job
    logging for hours kept every line in memory, to cut all but 2 MB at its end)."""

    __slots__ = ("dropped", "formatter", "level", "limit", "lines", "size")

    def __init__(self, level: int, formatter: logging.Formatter, limit: int) -> None:
        self.level = level
        self.formatter = formatter
        self.limit = limit
        self.lines: list[str] = []
        self.size = 0  # bytes of the lines kept, their newlines included
        self.dropped = 0  # records past the cap

    def add(self, record: logging.LogRecord) -> None:
        if self.size >= self.limit:
            self.dropped += 1
            return
        line = self.formatter.format(record)
        self.lines.append(line)
        # Never fewer bytes than the stored text: storable_text only widens characters
        # (a NUL or a lone surrogate becomes the 3-byte U+FFFD).
        self.size += len(line.encode(errors="surrogatepass")) + 1


_current: contextvars.ContextVar[_Capture | None] = contextvars.ContextVar(
    "riverboat_riverlog", default=None
)


class _RoutingHandler(logging.Handler):
    """One handler on the root logger for every RiverLog: routes a record to the attempt
    whose context it was made in, and ignores the rest."""

    def emit(self, record: logging.LogRecord) -> None:
        capture = _current.get()
        if capture is not None and record.levelno >= capture.level:
            try:
                capture.add(record)
            except Exception:
                self.handleError(record)
        last_resort = logging.lastResort
        if last_resort is not None and record.levelno >= last_resort.level:
            if not _other_handlers(record.name):
                # Being on the root logger hides logging's last resort (warnings printed
                # to stderr when nothing is configured); keep what it would have printed.
                last_resort.handle(record)


def _other_handlers(name: str) -> bool:
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if any(h is not _handler for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


_handler = _RoutingHandler(logging.NOTSET)
_install_lock = threading.Lock()


def _install() -> None:
    with _install_lock:
        root = logging.getLogger()
        if _handler not in root.handlers:
            root.addHandler(_handler)


def append_with_cap(
    existing: list[Any], entry: dict[str, Any], max_total_bytes: int
) -> tuple[list[Any], int]:
    """``existing + [entry]``, dropping the oldest entries until the encoded list fits in
    ``max_total_bytes`` (the new entry is always kept). Returns the list and how many
    were dropped. Sizes are those of the compact JSON encoding, as River counts them."""
    sizes = [len(go_json_storable(item).encode()) for item in existing]
    new_size = len(go_json_storable(entry).encode())
    total = 2 + new_size + sum(size + 1 for size in sizes)  # brackets, commas
    keep = 0
    while keep < len(existing) and total > max_total_bytes:
        total -= sizes[keep] + 1
        keep += 1
    return [*existing[keep:], entry], keep


class RiverLog:
    """Work middleware collecting each attempt's log records into ``river:log``.

    ``level``: the lowest level kept (records must also pass their logger's level).
    ``formatter``: how a record becomes a line (default: time, level, logger, message).
    """

    def __init__(
        self,
        *,
        level: int = logging.DEBUG,
        formatter: logging.Formatter | None = None,
        max_size_bytes: int = MAX_SIZE_BYTES,
        max_total_bytes: int = MAX_TOTAL_BYTES,
    ) -> None:
        for name, value in (
            ("max_size_bytes", max_size_bytes),
            ("max_total_bytes", max_total_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInputError(name, "must be a positive number of bytes")
        self.level = level
        self.formatter = formatter or logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        self.max_size_bytes = max_size_bytes
        self.max_total_bytes = min(max_total_bytes, MAX_TOTAL_BYTES_CEILING)
        _install()

    async def work(self, job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        capture = _Capture(self.level, self.formatter, self.max_size_bytes)
        token = _current.set(capture)
        try:
            await call_next()
        finally:
            _current.reset(token)
            if capture.lines:
                self._store(job, capture)

    def _store(self, job: Job[Any], capture: _Capture) -> None:
        # A log line can carry any text (a NUL, a lone surrogate from a decoded path).
        data = storable_text("\n".join(capture.lines) + "\n").encode()
        if len(data) > self.max_size_bytes or capture.dropped:
            log.warning(
                "job %d: its log passed %d bytes; kept the first %d%s",
                job.id,
                self.max_size_bytes,
                self.max_size_bytes,
                f" (and dropped {capture.dropped} records after them)" if capture.dropped else "",
            )
            data = data[: self.max_size_bytes]
        existing = job.staged_metadata.get(METADATA_KEY, job.metadata.get(METADATA_KEY, []))
        if not isinstance(existing, list):
            log.error("job %d: metadata %r is not a list; log not stored", job.id, METADATA_KEY)
            return
        entry = {"attempt": job.attempt, "log": data.decode(errors="ignore")}
        entries, dropped = append_with_cap(existing, entry, self.max_total_bytes)
        if dropped:
            log.warning(
                "job %d: logs exceed %d bytes in total; dropped the %d oldest entries",
                job.id,
                self.max_total_bytes,
                dropped,
            )
        job.set_metadata(METADATA_KEY, entries)
