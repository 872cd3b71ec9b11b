"""The answer a supervised example teaches for a prompt: its ``Target`` written in the family's output format."""

from __future__ import annotations

import json

from train.samples import RolloutPrompt

__all__ = ["answer_text"]


def answer_text(prompt: RolloutPrompt, *, think: bool = True) -> str:
    """The answer an SFT example teaches for ``prompt``, in its family's output format: InfiGUI-G1's point list
    (``[{"point_2d": [x, y]}]``, ``[]`` on a negative sample, after a short think block in think mode) or GUI-R1's
    action list. The point is the target box's centre (or the recorded point), in the model's coordinates."""
    t = prompt.target or {}
    family = t.get("family", "")
    point = t.get("point")
    if point is None and t.get("box") is not None:
        x1, y1, x2, y2 = t["box"]
        point = ((x1 + x2) / 2, (y1 + y2) / 2)
    if family == "gui-r1":
        action = t.get("action") or ("impossible" if t.get("negative") else "click")
        xy = [round(point[0]), round(point[1])] if point is not None else [-100, -100]
        text = t.get("text") or "no input text"
        return (f"<think>The task asks for {action}.</think> "
                f"<answer>[{{'action': '{action}', 'point': {xy}, 'input_text': '{text}'}}]</answer>")
    if family in ("infigui-g1", "") or "point_2d" in str(prompt.messages):
        answer = "[]" if point is None else json.dumps([{"point_2d": [round(point[0]), round(point[1])]}])
        if not (t.get("think", think)):
            return answer
        what = "is not on the screen" if point is None else "is at this point"
        return f"<think>The element for \"{t.get('instruction', '')}\" {what}.</think>\n{answer}"
    raise ValueError(f"no SFT answer format for model family {family!r}: cold-start SFT supports InfiGUI-G1 point "
                     f"lists and GUI-R1 actions")
