"""``riverboat ui``: a web dashboard for River's tables (queues, jobs, actions).

:func:`create_app` returns an ASGI application (Starlette) that reads and writes only
through riverboat's admin API; mount it in your own ASGI app, or run it with
``riverboat ui --database-url URL``. Needs the ``ui`` extra (``riverboat[ui]``).
"""

from __future__ import annotations

from riverboat.ui.app import Dashboard, create_app

__all__ = ["Dashboard", "create_app"]
