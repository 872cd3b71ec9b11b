"""UI-TARS's prompt templates, by (version, variant): the codes/prompts.py templates of UI-TARS-1.5
and the README_v1 templates of UI-TARS v1 (bytedance/UI-TARS). The format itself, and what differs
between the versions, is ``policy.formats.uitars``.
"""

from __future__ import annotations

SYSTEM_PROMPT = "You are a helpful assistant."

_BOX = "'<|box_start|>(x1,y1)<|box_end|>'"
_BOX3 = "'<|box_start|>(x3,y3)<|box_end|>'"
_FIRST = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "You need to perform the next action to complete the task."
)
_FENCE = "```\nThought: ...\nAction: ...\n```"
_ESC_NOTE = (
    "# Use escape characters \\', \\\", and \\n in content part to ensure we can parse the content in normal "
    "python string format."
)
_NOTE_15 = (
    "## Note\n- Use {language} in `Thought` part.\n"
    "- Write a small plan and finally summarize your next action (with its target element) in one sentence in "
    "`Thought` part.\n\n## User Instruction\n{instruction}"
)

COMPUTER_15 = (
    _FIRST + "\n\n## Output Format\n" + _FENCE + "\n\n## Action Space\n\n"
    f"click(start_box={_BOX})\n"
    f"left_double(start_box={_BOX})\n"
    f"right_single(start_box={_BOX})\n"
    f"drag(start_box={_BOX}, end_box={_BOX3})\n"
    "hotkey(key='')\n"
    "type(content='xxx') " + _ESC_NOTE + " If you want to submit your input, use \\n at the end of content. \n"
    f"scroll(start_box={_BOX}, direction='down or up or right or left')\n"
    "wait() #Sleep for 5s and take a screenshot to check for any changes.\n"
    "finished(content='xxx') " + _ESC_NOTE + "\n\n\n" + _NOTE_15
)
MOBILE_15 = (
    _FIRST + " \n## Output Format\n" + _FENCE + "\n## Action Space\n\n"
    f"click(start_box={_BOX})\n"
    f"long_press(start_box={_BOX})\n"
    "type(content='') #If you want to submit your input, use \"\\n\" at the end of `content`.\n"
    f"scroll(start_box={_BOX}, direction='down or up or right or left')\n"
    "open_app(app_name='')\n"
    f"drag(start_box={_BOX}, end_box={_BOX3})\n"
    "press_home()\n"
    "press_back()\n"
    "finished(content='xxx') " + _ESC_NOTE + "\n\n\n" + _NOTE_15
)
GROUNDING_15 = (
    _FIRST + " \n\n## Output Format\n\nAction: ...\n\n\n## Action Space\n"
    f"click(start_box={_BOX})\n\n## User Instruction\n{{instruction}}"
)
COMPUTER_1 = (
    _FIRST + " \n\n## Output Format\n" + _FENCE + "\n\n## Action Space\n\n"
    f"click(start_box={_BOX})\n"
    f"left_double(start_box={_BOX})\n"
    f"right_single(start_box={_BOX})\n"
    f"drag(start_box={_BOX}, end_box={_BOX3})\n"
    "hotkey(key='')\n"
    "type(content='') #If you want to submit your input, use \"\\n\" at the end of `content`.\n"
    f"scroll(start_box={_BOX}, direction='down or up or right or left')\n"
    "wait() #Sleep for 5s and take a screenshot to check for any changes.\n"
    "finished()\n"
    "call_user() # Submit the task and call the user when the task is unsolvable, or when you need the user's help.\n"
    "\n\n## Note\n- Use {language} in `Thought` part.\n"
    "- Summarize your next action (with its target element) in one sentence in `Thought` part.\n\n"
    "## User Instruction\n{instruction}"
)
MOBILE_1 = (
    _FIRST + " \n\n## Output Format\n" + _FENCE + "\n\n## Action Space\n"
    f"click(start_box={_BOX})\n"
    f"long_press(start_box={_BOX}, time='')\n"
    "type(content='')\n"
    f"scroll(start_box={_BOX}, end_box={_BOX3})\n"
    "press_home()\n"
    "press_back()\n"
    "finished(content='') # Submit the task regardless of whether it succeeds or fails.\n\n" + _NOTE_15
)
GROUNDING_1 = (
    "Output only the coordinate of one point in your response. What element matches the following task: "
    "{instruction}"
)
PROMPTS: dict[tuple[str, str], str] = {
    ("1.5", "computer"): COMPUTER_15, ("1.5", "mobile"): MOBILE_15, ("1.5", "grounding"): GROUNDING_15,
    ("1", "computer"): COMPUTER_1, ("1", "mobile"): MOBILE_1, ("1", "grounding"): GROUNDING_1,
}
