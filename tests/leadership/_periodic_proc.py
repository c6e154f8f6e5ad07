"""A riverboat client in its own process with one durable periodic job that ticks every
second (a seconds-first cron), for the durable periodic tests: it prints STARTED once
running, stops cleanly (resigning leadership) on SIGTERM, and dies at once on SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import sys

from riverboat import AsyncClient, PeriodicJob
from riverboat.runtime.producer import QueueConfig
from tests.leadership._helpers import TickArgs, default_workers, fast_maintenance


async def main(url: str, schema: str, client_id: str) -> None:
    client = AsyncClient(
        url,
        schema=schema or None,
        id=client_id,
        queues={"default": QueueConfig(max_workers=5)},
        workers=default_workers(),
        maintenance=fast_maintenance(),
        periodic_jobs=[PeriodicJob("* * * * * *", lambda: TickArgs(n=1), id="every_second")],
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start()
    print("STARTED", flush=True)
    await stop.wait()
    await client.stop()
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
