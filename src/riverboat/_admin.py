"""Job and queue administration for Client (sync) and AsyncClient.

Mixins over the clients' ``driver`` and ``_core``: each operation is one statement from
the dialect that returns full rows, run without a wrapping transaction. The ``*_tx``
forms run on the caller's connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from riverboat.client import _ClientCore

__all__ = ["AsyncAdmin", "SyncAdmin"]


class SyncAdmin:
    driver: Any
    _core: _ClientCore


class AsyncAdmin:
    driver: Any
    _core: _ClientCore
