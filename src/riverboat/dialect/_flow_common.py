"""The flow-controlled claim every dialect provides (see :mod:`riverboat.flow`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from riverboat._sql import Statement
from riverboat.flow import FlowControl

__all__ = ["FlowStatements"]


class FlowStatements(ABC):
    """Statements for flow control; :class:`~riverboat.dialect.base.Dialect` inherits
    them."""

    @abstractmethod
    def job_get_available_flow(
        self,
        *,
        queue: str,
        max_to_lock: int,
        client_id: str,
        flow: FlowControl,
        max_attempted_by: int,
        now: datetime | None = None,
    ) -> Statement:
        """River's claim, taking only the jobs ``flow`` lets start now."""
