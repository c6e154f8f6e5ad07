"""Django's connection (DjangoDriver), on the postgresql backend over psycopg 3.

The suite's test bodies are coroutines and Django refuses its connections inside an
event loop, so the adapter allows it (DJANGO_ALLOW_ASYNC_UNSAFE) while a case is open:
the statements still run synchronously on the test's thread, as in a sync program.
Caller-side connections are Django's own connection in an ``atomic()`` block.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from typing import Any

from tests.drivers.harness import Harness

_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


class Sync(Harness):
    async def open(self) -> Any:
        from tests.django import djsetup

        self._saved = os.environ.get(_UNSAFE)
        os.environ[_UNSAFE] = "true"
        djsetup.configure(self.env.url)
        assert self.env.schema is not None
        self._stack = ExitStack()
        self._stack.enter_context(djsetup.use_schema(self.env.schema))
        from riverboat.drivers.django import DjangoDriver

        return DjangoDriver(schema=self.env.schema)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        from django.db import connection, transaction

        with transaction.atomic():
            yield connection
            if not commit:
                transaction.set_rollback(True)

    async def close(self) -> None:
        try:
            self.driver.close()
            self._stack.close()
        finally:
            if self._saved is None:
                os.environ.pop(_UNSAFE, None)
            else:
                os.environ[_UNSAFE] = self._saved
