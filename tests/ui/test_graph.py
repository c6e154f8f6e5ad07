"""The workflow page's layout (riverboat/ui/graph.py), as pure geometry: a workflow too
large to draw task by task is drawn by groups, a long chain's columns are banded, the
table lists what needs attention first, and chains thousands of tasks deep are laid
out without recursion."""

from __future__ import annotations

from datetime import UTC, datetime

from riverboat import JobState
from riverboat._job import JobRow
from riverboat.ui.graph import COLUMNS_MAX, DRAW_TASKS_MAX, TABLE_TASKS_MAX, layout, table_tasks
from riverboat.workflow import WorkflowTaskInfo

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _task(job_id: int, name: str, deps: list[str], state: JobState) -> WorkflowTaskInfo:
    job = JobRow(
        id=job_id,
        encoded_args="{}",
        attempt=0,
        attempted_at=None,
        attempted_by=[],
        created_at=NOW,
        errors=[],
        finalized_at=None,
        kind="step",
        max_attempts=25,
        metadata={},
        priority=1,
        queue="default",
        state=state,
        scheduled_at=NOW,
        tags=[],
        unique_key=None,
        unique_states=None,
    )
    return WorkflowTaskInfo(name, job, deps, "cancel", None)


def _fan(leaves: int, leaf_state: JobState = JobState.PENDING) -> list[WorkflowTaskInfo]:
    tasks = [_task(1, "root", [], JobState.COMPLETED)]
    tasks += [_task(2 + i, f"leaf{i}", ["root"], leaf_state) for i in range(leaves)]
    tasks.append(_task(2 + leaves, "join", [f"leaf{i}" for i in range(leaves)], JobState.PENDING))
    return tasks


def test_a_small_workflow_is_drawn_task_by_task() -> None:
    drawing = layout(_fan(DRAW_TASKS_MAX - 2))
    assert len(drawing.nodes) == DRAW_TASKS_MAX and drawing.groups == []
    assert len(drawing.edges) == 2 * (DRAW_TASKS_MAX - 2)


def test_a_large_fan_out_is_drawn_as_one_group_per_column() -> None:
    tasks = _fan(998)
    tasks[5] = _task(tasks[5].job.id, tasks[5].name, ["root"], JobState.RUNNING)
    tasks[6] = _task(tasks[6].job.id, tasks[6].name, ["root"], JobState.DISCARDED)
    drawing = layout(tasks)
    assert drawing.nodes == []
    assert [(g.tasks, g.first, g.last) for g in drawing.groups] == [
        (1, "root", "root"),
        (998, "leaf0", "leaf997"),
        (1, "join", "join"),
    ]
    leaves = drawing.groups[1]
    assert [(s.state, s.count) for s in leaves.segments] == [
        ("pending", 996),
        ("running", 1),
        ("discarded", 1),
    ]
    assert sum(s.width for s in leaves.segments) <= 170 + len(leaves.segments)
    assert len(drawing.edges) == 2  # root -> leaves -> join


def test_a_long_chain_is_banded_and_laid_out_without_recursion() -> None:
    # Each step depends on the next one in the list (as tasks added in one batch may):
    # a recursive layout went 3,000 calls deep.
    steps = 3000
    tasks = [
        _task(i + 1, f"step{i}", [f"step{i + 1}"] if i + 1 < steps else [], JobState.PENDING)
        for i in range(steps)
    ]
    drawing = layout(tasks)
    assert 1 < len(drawing.groups) <= COLUMNS_MAX
    assert sum(g.tasks for g in drawing.groups) == steps
    # 40 bands of 75 columns; the first holds the chain's start, its last 75 steps.
    assert (drawing.groups[0].first, drawing.groups[0].last) == ("step2925", "step2999")
    assert len(drawing.edges) == len(drawing.groups) - 1


def test_the_table_lists_what_needs_attention_first_when_it_cannot_list_all() -> None:
    small = _fan(10)
    assert table_tasks(small) == small
    tasks = _fan(998, JobState.COMPLETED)
    tasks[700] = _task(tasks[700].job.id, tasks[700].name, ["root"], JobState.DISCARDED)
    tasks[300] = _task(tasks[300].job.id, tasks[300].name, ["root"], JobState.RUNNING)
    listed = table_tasks(tasks)
    assert len(listed) == TABLE_TASKS_MAX
    assert [t.name for t in listed[:3]] == [tasks[700].name, tasks[300].name, "join"]
    assert [t.name for t in listed[3:5]] == ["root", "leaf0"]  # then completed, in order
