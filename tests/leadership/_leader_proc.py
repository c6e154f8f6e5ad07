"""A riverboat client in its own process, for the crash test: it prints LEADER once
elected and then runs until it is killed (SIGKILL: no resignation)."""

from __future__ import annotations

import asyncio
import sys

from tests.leadership._helpers import elector_of, make_client


async def main(url: str, schema: str, client_id: str) -> None:
    client = make_client(url, schema, client_id)
    await client.start()
    await elector_of(client).leader.wait()
    print("LEADER", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
