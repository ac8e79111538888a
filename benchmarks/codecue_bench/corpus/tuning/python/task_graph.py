"""Run build tasks in dependency order, reporting cycles and missing dependencies clearly."""

from __future__ import annotations

import graphlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


class TaskError(Exception):
    """A task graph that cannot be run as written."""


@dataclass
class Task:
    name: str
    action: Callable[[], None]
    depends_on: tuple[str, ...] = ()
    description: str = ""


@dataclass
class RunResult:
    order: list[str] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    failed: str | None = None

    @property
    def ok(self) -> bool:
        return self.failed is None


# A graph of named tasks; edges point from a task to the tasks it waits for.
# Cycles are rejected when the graph is run, not when tasks are added.
class TaskGraph:
    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def add(self, name: str, action: Callable[[], None], *, after: Iterable[str] = (), description: str = "") -> Task:
        if name in self._tasks:
            raise TaskError(f"task {name!r} is defined twice")
        task = Task(name, action, tuple(after), description)
        self._tasks[name] = task
        return task

    # Decorator form of add(): the function name becomes the task name.
    def task(self, *after: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
        """Decorator form: ``@graph.task("compile")`` registers the function under its own name."""

        def register(function: Callable[[], None]) -> Callable[[], None]:
            self.add(function.__name__, function, after=after, description=(function.__doc__ or "").strip())
            return function

        return register

    def _check_dependencies(self) -> None:
        for task in self._tasks.values():
            missing = [dep for dep in task.depends_on if dep not in self._tasks]
            if missing:
                raise TaskError(f"task {task.name!r} depends on unknown task(s): {', '.join(missing)}")

    def order(self, targets: Iterable[str] | None = None) -> list[str]:
        """Tasks needed for *targets* (all tasks by default), dependencies first."""
        self._check_dependencies()
        wanted = self._closure(targets) if targets is not None else set(self._tasks)
        sorter = graphlib.TopologicalSorter({name: self._tasks[name].depends_on for name in wanted})
        try:
            return list(sorter.static_order())
        except graphlib.CycleError as exc:
            cycle = " -> ".join(exc.args[1])
            raise TaskError(f"dependency cycle: {cycle}") from None

    def _closure(self, targets: Iterable[str]) -> set[str]:
        seen: set[str] = set()
        stack = list(targets)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            if name not in self._tasks:
                raise TaskError(f"unknown target {name!r}")
            seen.add(name)
            stack.extend(self._tasks[name].depends_on)
        return seen

    def run(self, targets: Iterable[str] | None = None, *, dry_run: bool = False) -> RunResult:
        result = RunResult()
        for name in self.order(targets):
            task = self._tasks[name]
            result.order.append(name)
            if dry_run:
                logger.info("would run %s: %s", name, task.description or "(no description)")
                continue
            started = time.perf_counter()
            try:
                task.action()
            except Exception:
                logger.exception("task %s failed", name)
                result.failed = name
                break
            finally:
                result.durations[name] = time.perf_counter() - started
        return result


def describe(graph: TaskGraph) -> str:
    lines = []
    for name in graph.order():
        task = graph._tasks[name]
        deps = f" (after {', '.join(task.depends_on)})" if task.depends_on else ""
        lines.append(f"{name}{deps}: {task.description}")
    return "\n".join(lines)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    graph = TaskGraph()

    @graph.task()
    def fetch() -> None:
        """Download the sources."""

    @graph.task("fetch")
    def compile() -> None:
        """Compile everything."""

    @graph.task("compile")
    def test() -> None:
        """Run the unit tests."""

    print(describe(graph))
    outcome = graph.run(["test"])
    print("ok" if outcome.ok else f"failed at {outcome.failed}")
