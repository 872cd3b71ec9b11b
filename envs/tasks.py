"""Tasks whose outcome is checked by code, and the built-in tasks of the demo page.

A task's checker reads device state (for the web, the page's own JavaScript state), never what the
policy claims. Environments with many tasks and step verifiers build on this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from envs.errors import EnvError


@dataclass(frozen=True, slots=True)
class TaskVerdict:
    """A checker's judgement: success, the reward it is worth, and what was looked at."""

    success: bool
    reward: float
    details: dict[str, Any] = field(default_factory=dict)


class PageDevice(Protocol):
    """What a web task checker needs from a device."""

    async def evaluate(self, expression: str, arg: Any = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class ClickTask:
    """Success when the page's last clicked button (``data-clicked`` on <body>) is ``target_id``."""

    name: str
    instruction: str
    page: str
    """Path of the page under envs/pages/."""
    target_id: str
    aliases: tuple[str, ...] = ()
    """Other instructions that mean the same task."""

    def matches(self, instruction: str) -> bool:
        norm = _norm(instruction)
        return norm == _norm(self.instruction) or norm in {_norm(a) for a in self.aliases}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "page": self.page, "checker": f"last clicked button is #{self.target_id}"}

    async def check(self, device: PageDevice) -> TaskVerdict:
        state = await device.evaluate(
            "() => ({clicked: document.body.dataset.clicked || null, clicks: (window.handeye || {}).clicks || []})"
        )
        if not isinstance(state, dict):
            raise EnvError(f"task {self.name}: the page returned {json.dumps(state)} instead of its state")
        success = state.get("clicked") == self.target_id
        return TaskVerdict(success, 1.0 if success else 0.0, {"expected": self.target_id, **state})


BUILTIN_TASKS: dict[str, ClickTask] = {
    t.name: t
    for t in (
        ClickTask(
            "demo-subscribe",
            "Click the Subscribe button",
            "demo.html",
            "subscribe",
            aliases=("click Subscribe", 'click "Subscribe"', "subscribe"),
        ),
        ClickTask("demo-subscribe-zh", "点击“订阅”", "demo.html", "zh-subscribe", aliases=("点击订阅", "点击“订阅”按钮")),
        ClickTask("demo-save", "Click Save", "demo.html", "save", aliases=('click "Save"', "click the Save button")),
    )
}
DEFAULT_TASK = "demo-subscribe"


def find_builtin(instruction: str) -> ClickTask | None:
    """The built-in task an instruction names (by task name or instruction text), if any."""
    if instruction in BUILTIN_TASKS:
        return BUILTIN_TASKS[instruction]
    return next((t for t in BUILTIN_TASKS.values() if t.matches(instruction)), None)


def _norm(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".!")
