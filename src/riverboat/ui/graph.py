"""A workflow drawn as a layered graph (what the dashboard's workflow page shows):
each task in the column of its longest chain of dependencies, edges from a dependency's
right side to its dependent's left side. Pure geometry; the template draws the SVG.

A workflow of more than DRAW_TASKS_MAX tasks is drawn by groups instead: one node per
column (neighbouring columns banded together beyond COLUMNS_MAX), with its task count,
its first and last task's names and a bar of its tasks' states. Every task drawn, a
10,000-task workflow made a 6 MB page that kept the browser busy for 3 s at each of its
2 s refreshes; the page's table lists the tasks that need attention first
(:func:`table_tasks`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from riverboat._job import LIFECYCLE_ORDER, JobState
from riverboat.workflow import WorkflowTaskInfo

__all__ = ["DRAW_TASKS_MAX", "TABLE_TASKS_MAX", "Drawing", "layout", "table_tasks"]

DRAW_TASKS_MAX = 400
COLUMNS_MAX = 40
GROUP_HEIGHT = 70
TABLE_TASKS_MAX = 200
# The table's order when it cannot list every task: what needs attention first.
_ATTENTION = {
    JobState.DISCARDED: 0,
    JobState.CANCELLED: 0,
    JobState.RETRYABLE: 1,
    JobState.RUNNING: 2,
    JobState.AVAILABLE: 3,
    JobState.SCHEDULED: 3,
    JobState.PENDING: 4,
    JobState.COMPLETED: 5,
}

# The drawing's sizes, in SVG pixels: a task's box, the gaps between columns and between
# boxes of a column, and the margin around the whole graph.
NODE_WIDTH, NODE_HEIGHT = 170, 44
COLUMN_GAP, ROW_GAP = 70, 16
MARGIN = 10


@dataclass(slots=True, frozen=True)
class Node:
    """One task's box, its top left corner at (``x``, ``y``)."""

    task: WorkflowTaskInfo
    x: int
    y: int


@dataclass(slots=True, frozen=True)
class Edge:
    """A dependency's arrow: from the right side of the dependency's box (``x1``, ``y1``)
    to the left side of its dependent's (``x2``, ``y2``)."""

    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(slots=True, frozen=True)
class Segment:
    """A part of a group's state bar: ``count`` tasks in ``state``."""

    state: str
    count: int
    x: int
    width: int


@dataclass(slots=True, frozen=True)
class Group:
    """Tasks drawn as one node: a column of the graph, or a band of columns."""

    tasks: int
    first: str
    last: str
    segments: list[Segment]
    x: int
    y: int


@dataclass(slots=True, frozen=True)
class Drawing:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int
    groups: list[Group] = field(default_factory=list)


def _depths(tasks: Sequence[WorkflowTaskInfo]) -> dict[str, int]:
    """Each task's column: the length of its longest chain of stored dependencies (a
    dependency not stored, or one that closes a cycle, counts for nothing). Depth
    first without recursion: a chain added in one batch can be thousands of tasks
    long in any order."""
    by_name = {task.name: task for task in tasks}
    depth: dict[str, int] = {}
    for task in tasks:
        if task.name in depth:
            continue
        path = {task.name}
        stack = [(task, iter(task.deps))]
        while stack:
            current, deps = stack[-1]
            for dep in deps:
                if dep in by_name and dep not in depth and dep not in path:
                    path.add(dep)
                    stack.append((by_name[dep], iter(by_name[dep].deps)))
                    break
            else:
                stack.pop()
                path.discard(current.name)
                depth[current.name] = 1 + max(
                    (depth[dep] for dep in current.deps if dep in depth), default=-1
                )
    return depth


def layout(tasks: Sequence[WorkflowTaskInfo]) -> Drawing:
    if len(tasks) > DRAW_TASKS_MAX:
        return _grouped(tasks)
    depth = _depths(tasks)
    columns: dict[int, list[WorkflowTaskInfo]] = {}
    for task in tasks:
        columns.setdefault(depth[task.name], []).append(task)
    place: dict[str, Node] = {}
    for column, members in sorted(columns.items()):
        for row, task in enumerate(members):
            x = MARGIN + column * (NODE_WIDTH + COLUMN_GAP)
            y = MARGIN + row * (NODE_HEIGHT + ROW_GAP)
            place[task.name] = Node(task, x, y)
    edges = [
        Edge(
            place[dep].x + NODE_WIDTH,
            place[dep].y + NODE_HEIGHT // 2,
            node.x,
            node.y + NODE_HEIGHT // 2,
        )
        for node in place.values()
        for dep in node.task.deps
        if dep in place
    ]
    width = MARGIN * 2 + (max(columns, default=0) + 1) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    tallest = max((len(members) for members in columns.values()), default=1)
    height = MARGIN * 2 + tallest * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    return Drawing(list(place.values()), edges, width, height)


def _grouped(tasks: Sequence[WorkflowTaskInfo]) -> Drawing:
    depth = _depths(tasks)
    band_width = max(1, math.ceil((max(depth.values(), default=0) + 1) / COLUMNS_MAX))
    band_of = {name: column // band_width for name, column in depth.items()}
    bands: dict[int, list[WorkflowTaskInfo]] = {}
    for task in tasks:
        bands.setdefault(band_of[task.name], []).append(task)
    groups: dict[int, Group] = {}
    for position, (band, members) in enumerate(sorted(bands.items())):
        counts: dict[JobState, int] = {}
        for task in members:
            counts[task.state] = counts.get(task.state, 0) + 1
        segments: list[Segment] = []
        x = MARGIN + position * (NODE_WIDTH + COLUMN_GAP)
        left = x
        for state in (*LIFECYCLE_ORDER, *(s for s in counts if s not in LIFECYCLE_ORDER)):
            count = counts.get(state, 0)
            if count:
                width = max(1, round(NODE_WIDTH * count / len(members)))
                segments.append(Segment(state.value, count, left, width))
                left += width
        groups[band] = Group(len(members), members[0].name, members[-1].name, segments, x, MARGIN)
    linked = {
        (band_of[dep], band_of[task.name])
        for task in tasks
        for dep in task.deps
        if dep in band_of and band_of[dep] != band_of[task.name]
    }
    middle = MARGIN + GROUP_HEIGHT // 2
    edges = [Edge(groups[a].x + NODE_WIDTH, middle, groups[b].x, middle) for a, b in sorted(linked)]
    width = MARGIN * 2 + len(groups) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    return Drawing([], edges, width, MARGIN * 2 + GROUP_HEIGHT, list(groups.values()))


def table_tasks(tasks: Sequence[WorkflowTaskInfo]) -> list[WorkflowTaskInfo]:
    """The tasks the page's table lists: all of them in order, or, beyond
    TABLE_TASKS_MAX, that many, those that need attention first (failed, retrying,
    running, waiting, then completed), each group in order."""
    if len(tasks) <= TABLE_TASKS_MAX:
        return list(tasks)
    ranked = sorted(range(len(tasks)), key=lambda i: (_ATTENTION.get(tasks[i].state, 4), i))
    return [tasks[i] for i in ranked[:TABLE_TASKS_MAX]]
