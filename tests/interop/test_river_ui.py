"""River UI (riverqueue.com/riverui, the Go module, built into interop/go) served against
a database riverboat wrote: its HTTP API lists riverboat's jobs, queues and errors, and
its retry, cancel, delete and pause actions land on riverboat's rows."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import Client, InsertOpts, Job, NotFoundError, QueueConfig, Workers
from tests.interop import helpers
from tests.interop.river_go import GoProcess, RiverGo, Target


class RiverUI:
    def __init__(self, process: GoProcess) -> None:
        self.process = process
        listening = process.wait_event(lambda e: e.get("event") == "listening", timeout=30)
        self.url: str = listening["url"]

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def get(self, path: str) -> Any:
        return self.request("GET", path)


@pytest.fixture
def river_ui(river: RiverGo) -> Iterator[RiverUI]:
    process = river.start("ui")
    try:
        yield RiverUI(process)
    finally:
        process.stop()


def riverboat_jobs(target: Target) -> dict[str, int]:
    """A riverboat worker leaves one job per state River UI shows: completed,
    discarded (with riverboat's error), available (in a queue nobody works),
    scheduled; and registers its queues."""
    workers = Workers()

    @workers.register("ui_ok")
    def ok(job: Job[Any]) -> None:
        pass

    @workers.register("ui_broken")
    def broken(job: Job[Any]) -> None:
        raise RuntimeError("riverboat <error> for River UI")

    with helpers.client(
        target, workers, queues={"default": QueueConfig(), "mail": QueueConfig()}
    ) as client:
        ids = {
            "completed": client.insert({"n": 1}, kind="ui_ok").job.id,
            "discarded": client.insert(
                {"n": 2}, InsertOpts(max_attempts=1), kind="ui_broken"
            ).job.id,
            "mail": client.insert({"n": 3}, InsertOpts(queue="mail"), kind="ui_ok").job.id,
        }
        client.run_until_idle()
        ids["available"] = client.insert({"n": 4}, InsertOpts(queue="parked"), kind="ui_ok").job.id
        later = datetime.now(UTC) + timedelta(hours=1)
        ids["scheduled"] = client.insert(
            {"n": 5}, InsertOpts(scheduled_at=later), kind="ui_ok"
        ).job.id
    return ids


def test_river_ui_lists_riverboat_jobs_queues_and_errors(
    river: RiverGo, target: Target, river_ui: RiverUI
) -> None:
    ids = riverboat_jobs(target)
    for state in ("completed", "discarded", "available", "scheduled"):
        listed = river_ui.get(f"/api/jobs?state={state}")["data"]
        assert ids[state] in [job["id"] for job in listed], f"{state}: {listed}"
    discarded = river_ui.get(f"/api/jobs/{ids['discarded']}")
    assert discarded["state"] == "discarded" and discarded["kind"] == "ui_broken"
    assert "riverboat <error> for River UI" in discarded["errors"][0]["error"]
    assert discarded["attempted_by"] and discarded["finalized_at"]
    queues = {q["name"]: q for q in river_ui.get("/api/queues")["data"]}
    assert {"default", "mail"} <= set(queues)
    states = river_ui.get("/api/states")
    assert states["completed"]["count"] == 2 and states["discarded"]["count"] == 1


def test_river_ui_actions_on_riverboat_jobs(
    river: RiverGo, target: Target, river_ui: RiverUI
) -> None:
    ids = riverboat_jobs(target)
    river_ui.request("POST", "/api/jobs/retry", {"ids": [str(ids["discarded"])]})
    river_ui.request("POST", "/api/jobs/cancel", {"ids": [str(ids["scheduled"])]})
    river_ui.request("POST", "/api/jobs/delete", {"ids": [str(ids["completed"])]})
    river_ui.request("PUT", "/api/queues/mail/pause", {})
    with Client(target.url, schema=target.schema) as client:
        retried = client.job_get(ids["discarded"])
        assert retried.state == "available" and retried.finalized_at is None
        assert retried.errors and "riverboat <error>" in retried.errors[0].error
        cancelled = client.job_get(ids["scheduled"])
        assert cancelled.state == "cancelled" and cancelled.finalized_at is not None
        with pytest.raises(NotFoundError):
            client.job_get(ids["completed"])
        assert client.queue_get("mail").paused_at is not None


def test_river_ui_in_chromium_shows_a_riverboat_job_and_its_error(
    river: RiverGo, target: Target, river_ui: RiverUI, page: Any
) -> None:
    """River UI's own front end, in Debian's chromium: the discarded riverboat job's page
    shows its kind and riverboat's error, and the jobs list shows it."""
    ids = riverboat_jobs(target)
    page.goto(f"{river_ui.url}/jobs/{ids['discarded']}")
    page.get_by_text("riverboat <error> for River UI").first.wait_for(timeout=20_000)
    page.get_by_text("ui_broken").first.wait_for(timeout=10_000)
    page.goto(f"{river_ui.url}/jobs?state=discarded")
    page.get_by_text("ui_broken").first.wait_for(timeout=20_000)


def test_river_ui_retry_button_in_chromium_retries_a_riverboat_job(
    river: RiverGo, target: Target, river_ui: RiverUI, page: Any
) -> None:
    ids = riverboat_jobs(target)
    page.goto(f"{river_ui.url}/jobs/{ids['discarded']}")
    page.get_by_role("button", name="Retry").first.click(timeout=20_000)
    with Client(target.url, schema=target.schema) as client:
        helpers.wait_for_state(client, ids["discarded"], "available")
