"""A workflow drawn as a layered graph (what the dashboard's workflow page shows):
each task in the column of its longest chain of dependencies, edges from a dependency's
right side to its dependent's left side. Pure geometry; the template draws the SVG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from riverboat.workflow import WorkflowTaskInfo

__all__ = ["Drawing", "layout"]

NODE_WIDTH = 170
NODE_HEIGHT = 44
COLUMN_GAP = 70
ROW_GAP = 16
MARGIN = 10


@dataclass(slots=True, frozen=True)
class Node:
    task: WorkflowTaskInfo
    x: int
    y: int


@dataclass(slots=True, frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(slots=True, frozen=True)
class Drawing:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def layout(tasks: Sequence[WorkflowTaskInfo]) -> Drawing:
    by_name = {task.name: task for task in tasks}
    depth: dict[str, int] = {}

    def depth_of(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in depth:
            return depth[name]
        task = by_name.get(name)
        if task is None or name in seen:  # a dependency not stored, or a cycle
            return -1
        level = 1 + max((depth_of(dep, seen | {name}) for dep in task.deps), default=-1)
        depth[name] = level
        return level

    columns: dict[int, list[WorkflowTaskInfo]] = {}
    for task in tasks:
        columns.setdefault(depth_of(task.name), []).append(task)
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
