"""Replaying a recorded episode on a device (``agent replay``), step by step, saying where the screen diverged.

    plan = plan_replay(read_episode("runs/<run>/ep0000"), secret_for={"#pw": "PASSWORD"})
    result = await replay_episode(episode, plan, TaskEnv(device, episode.record.task), writer)
    result.matched, [r.verdict for r in result.steps]

A demonstration (or any recorded episode) is re-executed through the one episode runner (``agent/runner.py``) with
``ReplayPolicy``: a ``ScriptedPolicy`` (``policy/scripted.py``) that yields the recorded actions, so the replay is
itself a recorded run. Each action goes through the coordinate contract as recorded, except on the web, where the
recorded element is looked for again (the step's ``info.env_info.demo.selector`` in its frame,
``devices.web.locate``): a click, double or right click, hover, long press or drag starts at the element's current
centre, and typing goes into the element (clicked first unless it already has the focus).

Left out, each with its reason in the report: steps that were not executed in the recording (an output that did not
parse, a refused action), pauses (a ``wait`` the pause key made), and text that was masked because it went into a
password field. Masked text is typed again only when the user says which secret it was: ``--secret-for
SELECTOR=NAME`` replays it as ``{{secret:NAME}}``, which the runner fills in from the config's ``[secrets]`` just
before typing, as in any run; the stored replay never holds the value.

Divergence: before each action, the replay's screen (the pre-action frame, password fields blurred as in the
recording) is compared with the recorded pre-action frame: both are turned gray and downscaled to
``COMPARE_WIDTH`` pixels wide, and the share of pixels whose gray level moved by more than ``PIXEL_DELTA`` is taken
over the whole frame and inside the step's recorded target box. A step diverged when either share is over its
tolerance, when the recorded element was not found or now has another accessible name, when the device refused or
failed the action, or when the replay ended before reaching it. A person's pointer rests on the target before a
click, so a recorded frame often shows it hovered: when the screens differ before a pointer action, the replay rests
its pointer on the target, looks again, and the closer of the two comparisons counts (the step's note says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import numpy as np

from agent.episode import EpisodeResult, RunOptions
from agent.runner import run_episode
from agent.secrets import MASK, Secrets
from agent.summary import describe_action
from devices.actions import POINTED_KINDS, TERMINAL_KINDS, Action, ActionKind, Point
from devices.base import Box, Observation
from devices.errors import InvalidAction
from devices.frames import blur_boxes, small_gray
from devices.recording import MASKED_TEXT
from devices.settle import changed_fraction
from envs.base import Env
from envs.errors import RecordFormatError
from envs.records import StepRecord
from envs.trajectory import Episode, EpisodeWriter
from policy.base import Decision, HistoryEntry
from policy.scripted import ScriptedPolicy

log = logging.getLogger(__name__)

COMPARE_WIDTH = 320
"""Frames are compared gray, this many pixels wide (aspect kept): small enough to ignore antialiasing, large enough
that a 30-pixel button of a 1280-pixel screen still covers a few pixels."""
PIXEL_DELTA = 16
"""A pixel differs when its gray level moved by more than this (0-255): compression noise and a caret do not."""
FRAME_TOLERANCE = 0.02
"""Default: a step diverged when more than this share of the whole frame differs."""
BOX_TOLERANCE = 0.15
"""Default: a step diverged when more than this share of its target box differs."""


class Verdict(str, Enum):
    OK = "ok"
    DIVERGED = "diverged"
    SKIPPED = "skipped"
    """Not replayed on purpose (see the module docstring); it neither matched nor diverged."""


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """One recorded step and what the replay does with it."""

    recorded: StepRecord
    action: Action | None
    """None: the step is skipped (``skip`` says why)."""
    skip: str = ""
    selector: str = ""
    frame_url: str = ""
    name: str = ""
    """The accessible name the recorder saw on the element."""


@dataclass(frozen=True, slots=True)
class Tolerances:
    frame: float = FRAME_TOLERANCE
    box: float = BOX_TOLERANCE


@dataclass(frozen=True, slots=True)
class StepReport:
    """How one recorded step went in the replay."""

    index: int
    """The recorded step's index."""
    action: str
    verdict: Verdict
    element: str = ""
    """found / moved / renamed / missing, or "" when the step names no element (or the device cannot look)."""
    frame_diff: float | None = None
    box_diff: float | None = None
    replay_index: int | None = None
    """The replay's step that performed it (None: skipped or never reached)."""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.index, "action": self.action, "verdict": self.verdict.value, "element": self.element,
                "frame_diff": self.frame_diff, "box_diff": self.box_diff, "replay_step": self.replay_index,
                "note": self.note}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    episode: EpisodeResult
    steps: tuple[StepReport, ...]

    @property
    def matched(self) -> bool:
        """No step diverged (skipped steps aside) and the replay was not aborted."""
        return all(s.verdict is not Verdict.DIVERGED for s in self.steps)

    def to_dict(self, source: str) -> dict[str, Any]:
        record = self.episode.record
        return {"source": source, "replay": str(self.episode.path), "outcome": record.outcome.value
                if record.outcome else None, "matched": self.matched,
                "diverged": [s.index for s in self.steps if s.verdict is Verdict.DIVERGED],
                "skipped": [s.index for s in self.steps if s.verdict is Verdict.SKIPPED],
                "steps": [s.to_dict() for s in self.steps]}


# -- the plan -------------------------------------------------------------------------------------------------------
def plan_replay(episode: Episode, secret_for: Mapping[str, str] | None = None) -> list[PlannedStep]:
    """Every recorded step with the action to replay or the reason it is skipped (see the module docstring).
    ``secret_for`` maps an element's recorded selector to the name of the secret typed into it."""
    secret_for = dict(secret_for or {})
    out = []
    for step in episode.steps:
        demo = ((step.info.get("env_info") or {}).get("demo") or {}) if isinstance(step.info, dict) else {}
        where = {"selector": str(demo.get("selector") or ""), "frame_url": str(demo.get("frame") or ""),
                 "name": str(demo.get("name") or "")}
        action, skip = _planned_action(step, demo, where["selector"], secret_for)
        out.append(PlannedStep(step, action, skip, **where))
    return out


def _planned_action(step: StepRecord, demo: dict[str, Any], selector: str, secret_for: dict[str, str]
                    ) -> tuple[Action | None, str]:
    if step.action is None:
        return None, "the recorded step has no action (its output did not parse)"
    try:
        action = Action.from_dict(step.action)
    except InvalidAction as e:
        return None, f"the recorded action is not valid: {e}"
    if action.kind in TERMINAL_KINDS:
        return action, ""
    if not step.executed:
        why = (step.error or {}).get("message") or (step.guard or {}).get("reason") or "it was not performed"
        return None, f"not executed in the recording: {why}"
    if action.kind is ActionKind.WAIT and "paused_s" in demo:
        return None, f"a pause in the recording ({float(demo['paused_s']):.1f} s)"
    if step.sensitive and action.text in (MASK, MASKED_TEXT):
        name = secret_for.get(selector)
        if name is None:
            return None, ("masked text typed into a password field" + (f" ({selector})" if selector else "") +
                          "; pass --secret-for SELECTOR=NAME to type the secret NAME there")
        return replace(action, text="{{secret:" + name + "}}"), ""
    return action, ""


# -- comparing frames -----------------------------------------------------------------------------------------------
def frame_difference(recorded: np.ndarray, replayed: np.ndarray, box: Sequence[float] | None
                     ) -> tuple[float, float | None]:
    """(share of the frame that differs, share of ``box`` that differs, None without a box), comparing gray
    frames ``COMPARE_WIDTH`` wide (a replayed frame of another size is scaled to the recorded one's)."""
    a = small_gray(recorded, COMPARE_WIDTH)
    b = small_gray(replayed, COMPARE_WIDTH)
    if b.shape != a.shape:
        import cv2

        b = cv2.resize(b, (a.shape[1], a.shape[0]), interpolation=cv2.INTER_AREA)
    whole = changed_fraction(a, b, PIXEL_DELTA)
    if box is None:
        return whole, None
    h, w = a.shape
    left, top, right, bottom = Box(*box).clipped().to_pixels(w, h)
    right, bottom = max(right, left + 1), max(bottom, top + 1)
    inside = changed_fraction(a[top:bottom, left:right], b[top:bottom, left:right], PIXEL_DELTA)
    return whole, inside


def _masked(obs: Observation) -> np.ndarray:
    """The frame as a recording stores it: password fields blurred."""
    if not obs.sensitive_boxes:
        return obs.frame
    w, h = obs.size
    return blur_boxes(obs.frame, [b.to_pixels(w, h) for b in obs.sensitive_boxes])


# -- the policy -----------------------------------------------------------------------------------------------------
class ReplayPolicy:
    """The recorded actions, one per decision, from a ``ScriptedPolicy``; on the web each is aimed at its recorded
    element where it can be found, and every decision first compares the screen with the recorded one."""

    name = "replay"

    def __init__(self, episode: Episode, plan: Sequence[PlannedStep], env: Env) -> None:
        self.episode = episode
        self.entries = [p for p in plan if p.action is not None]
        self.script = ScriptedPolicy([p.action for p in self.entries if p.action is not None])
        self.env = env
        self.checks: dict[int, dict[str, Any]] = {}
        """Plan position (among the replayed entries) -> what its decision found (its replay step, the element,
        the frame differences)."""
        self.decisions = 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": str(self.episode.path), "steps": len(self.entries)}

    async def decide(self, task: str, history: Sequence[HistoryEntry], observation: Observation, n: int = 1
                     ) -> Decision:
        position = self.script.position
        decision = await self.script.decide(task, history, observation, n)
        step_index, self.decisions = self.decisions, self.decisions + 1
        if position >= len(self.entries) or decision.action is None:
            return decision
        entry = self.entries[position]
        action, element, note = await self._aim(entry, decision.action)
        check: dict[str, Any] = {"recorded_step": entry.recorded.index, "replay_step": step_index,
                                 "element": element, "note": note}
        try:
            recorded = self.episode.frame(entry.recorded)
            box = entry.recorded.target_box
            check["frame_diff"], check["box_diff"] = frame_difference(recorded, _masked(observation), box)
            if check["frame_diff"] > 0 or (check["box_diff"] or 0) > 0:
                hovered = await self._pointer_on(action)
                if hovered is not None:
                    diffs = frame_difference(recorded, _masked(hovered), box)
                    if (diffs[1] or 0, diffs[0]) < (check["box_diff"] or 0, check["frame_diff"]):
                        check["frame_diff"], check["box_diff"] = diffs
                        check["compared"] = "with the pointer on the target"
        except (RecordFormatError, ValueError) as e:
            check["note"] = f"{note}; recorded frame unreadable: {e}".lstrip("; ")
        self.checks[position] = check
        return replace(decision, action=action, info={**decision.info, "replay": check})

    async def _pointer_on(self, action: Action) -> Observation | None:
        """The screen with the pointer resting on ``action``'s point, or None (no point, no device, or one that
        cannot hover). A person's pointer rests on a button before the click, so a recorded frame often shows the
        target hovered, while the replay's own frame shows it as the previous action left the pointer; the screen
        is compared both ways and the closer one counts."""
        device = self.env.device
        if action.point is None or action.kind not in POINTED_KINDS or device is None:
            return None
        if ActionKind.HOVER not in device.supported_actions:
            return None
        await device.act(Action(ActionKind.HOVER, point=action.point))
        await device.settle()
        return await device.observe()

    async def _aim(self, entry: PlannedStep, action: Action) -> tuple[Action, str, str]:
        """(the action to perform, what became of its element, a note). Only the web can look elements up."""
        from devices.web import PlaywrightDevice
        from devices.web.locate import centre_of, locate

        device = self.env.device
        if not entry.selector or not isinstance(device, PlaywrightDevice):
            return action, "", ""

        found = await locate(device, entry.selector, entry.frame_url)
        if found is None:
            return action, "missing", f"{entry.selector} not found: coordinates as recorded"
        element = "renamed" if entry.name and found.name != entry.name else "found"
        note = f"now named {found.name!r}, recorded {entry.name!r}" if element == "renamed" else ""
        centre = centre_of(found)
        if centre is None:
            return action, element, (note + "; " if note else "") + "element off screen: coordinates as recorded"
        aimed = _aimed(action, Point(*centre), found.focused)
        if aimed.point is not None and action.point is not None and element == "found":
            dx, dy = aimed.point.x - action.point.x, aimed.point.y - action.point.y
            if max(abs(dx), abs(dy)) > 0.005:
                element, note = "moved", f"moved by ({dx:+.3f}, {dy:+.3f}) of the screen"
        return aimed, element, note


def _aimed(action: Action, centre: Point, focused: bool) -> Action:
    """``action`` performed on the element whose centre is ``centre`` now."""
    kind = action.kind
    if kind is ActionKind.DRAG and action.point is not None and action.end is not None:
        dx, dy = centre.x - action.point.x, centre.y - action.point.y
        end = Point(min(max(action.end.x + dx, 0.0), 1.0), min(max(action.end.y + dy, 0.0), 1.0))
        return replace(action, point=centre, end=end)
    if kind in POINTED_KINDS:
        return replace(action, point=centre)
    if kind is ActionKind.TYPE and not (focused and action.point is None):
        return replace(action, point=centre)  # click into the field first unless the typing goes there anyway
    return action  # keys go where the focus is; a scroll turns the wheel where the person did


# -- judging and running --------------------------------------------------------------------------------------------
def judge(plan: Sequence[PlannedStep], checks: Mapping[int, dict[str, Any]], steps: Sequence[StepRecord],
          tolerances: Tolerances = Tolerances()) -> list[StepReport]:
    """One report per recorded step, from the replay's checks and its step records (indexed by replay step)."""
    by_index = {s.index: s for s in steps}
    out: list[StepReport] = []
    position = 0
    for entry in plan:
        described = describe_action(entry.recorded.action)
        if entry.action is None:
            out.append(StepReport(entry.recorded.index, described, Verdict.SKIPPED, note=entry.skip))
            continue
        check = checks.get(position)
        position += 1
        if check is None:
            out.append(StepReport(entry.recorded.index, described, Verdict.DIVERGED,
                                  note="not reached: the replay ended before this step"))
            continue
        out.append(_report(entry, check, by_index.get(check["replay_step"]), described, tolerances))
    return out


def _report(entry: PlannedStep, check: dict[str, Any], done: StepRecord | None, described: str,
            tolerances: Tolerances) -> StepReport:
    frame_diff, box_diff = check.get("frame_diff"), check.get("box_diff")
    problems = [check["note"]] if check.get("note") else []
    if check.get("compared"):
        problems.append(f"screen compared {check['compared']}")
    diverged = check.get("element") in ("missing", "renamed")
    if done is None:
        diverged, problems = True, [*problems, "its step was not written (the replay was stopped)"]
    elif done.error or (not done.executed and entry.action is not None and entry.action.kind not in TERMINAL_KINDS):
        reason = (done.error or {}).get("message") or (done.guard or {}).get("reason") or "not performed"
        diverged, problems = True, [*problems, f"not performed: {reason}"]
    if frame_diff is not None and frame_diff > tolerances.frame:
        diverged, problems = True, [*problems, f"{frame_diff:.1%} of the screen differs"]
    if box_diff is not None and box_diff > tolerances.box:
        diverged, problems = True, [*problems, f"{box_diff:.1%} of the target box differs"]
    return StepReport(entry.recorded.index, described, Verdict.DIVERGED if diverged else Verdict.OK,
                      check.get("element", ""), _rounded(frame_diff), _rounded(box_diff), check["replay_step"],
                      "; ".join(p for p in problems if p))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


async def replay_episode(episode: Episode, plan: Sequence[PlannedStep], env: Env, writer: EpisodeWriter, *,
                         tolerances: Tolerances = Tolerances(), secrets: Secrets | None = None, guard: Any = None,
                         person: Any = None, assume_yes: bool = False,
                         on_step: Callable[[StepRecord], None] | None = None,
                         stop: asyncio.Event | None = None) -> ReplayResult:
    """Replay ``plan`` (from ``plan_replay(episode)``) on ``env`` into ``writer``'s episode; the caller closes
    ``env``. The runner's step records and the policy's checks are joined into one report per recorded step."""
    policy = ReplayPolicy(episode, plan, env)
    steps: list[StepRecord] = []

    def seen(step: StepRecord) -> None:
        steps.append(step)
        if on_step is not None:
            on_step(step)

    result = await run_episode(env, policy, writer, options=RunOptions(max_parse_retries=len(plan) + 1,
                                                                       assume_yes=assume_yes),
                               guard=guard, secrets=secrets, on_step=seen, stop=stop, person=person)
    return ReplayResult(result, tuple(judge(plan, policy.checks, steps, tolerances)))

