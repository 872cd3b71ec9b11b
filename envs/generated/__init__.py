"""Procedurally generated GUI screens with exact ground truth; importing this registers the
"generated/*" environments."""

from envs.generated.env import GeneratedEnv
from envs.generated.layout import Screen, ScreenParams, TaskKind, generate
from envs.registry import register

_ENTRY = "envs.generated.env:GeneratedEnv"
_ENVS = {
    "generated/click": ("click a named widget (English, light, desktop)", {}),
    "generated/click-easy": ("click a named widget: large target, little clutter", {"difficulty": "easy"}),
    "generated/click-hard": ("click a named widget: small target, clutter, look-alike labels", {"difficulty": "hard"}),
    "generated/click-zh": ("click a named widget (Chinese)", {"language": "zh"}),
    "generated/click-dark": ("click a named widget (dark theme)", {"theme": "dark"}),
    "generated/click-phone": ("click a named widget on a 390 x 844 phone screen", {"form_factor": "phone"}),
    "generated/form": ("type into one or two fields, then click Submit", {"task_kind": "form"}),
    "generated/form-zh": ("type into fields, then click Submit (Chinese)", {"task_kind": "form", "language": "zh"}),
    "generated/absent": ("the named widget is absent: the right answer is infeasible", {"task_kind": "absent"}),
    "generated/phrasing": ("click a named widget, the instruction worded one of 21 ways (English)",
                           {"phrasing": True}),
    "generated/phrasing-zh": ("click a named widget, the instruction worded one of 16 ways (Chinese)",
                              {"phrasing": True, "language": "zh"}),
}

_MAX_STEPS = {"click": 3, "form": 8, "absent": 3}
"""Step budget per task kind: a click task is one click; a form is up to two fields, their typing and Submit."""

for _name, (_description, _kwargs) in _ENVS.items():
    register(_name, _ENTRY, "generated", _description, device_kind="web", env_name=_name,
             max_steps=_MAX_STEPS[_kwargs.get("task_kind", "click")], **_kwargs)

__all__ = ["GeneratedEnv", "Screen", "ScreenParams", "TaskKind", "generate"]
