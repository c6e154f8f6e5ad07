"""The queue model: a ``river_queue`` row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["QueueRow"]


@dataclass(slots=True, frozen=True)
class QueueRow:
    """A ``river_queue`` row. ``paused_at`` is set while the queue is paused."""

    name: str
    created_at: datetime
    metadata: dict[str, Any]
    paused_at: datetime | None
    updated_at: datetime

    @property
    def paused(self) -> bool:
        return self.paused_at is not None
