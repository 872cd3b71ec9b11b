"""MiniWoB++ (the ``miniwob`` package's task pages, driven from Playwright); importing this registers
"miniwob/<task>" for every task the package ships in html/miniwob/."""

from envs.miniwob.env import DEFAULT_MAX_STEPS, TARGET_TASKS, MiniWobEnv, html_root
from envs.miniwob.tasks import TASKS
from envs.registry import register

SUPPORTED_BY_ORACLE: tuple[str, ...] = tuple(sorted(TARGET_TASKS))
"""Tasks whose next target is read from the DOM: env.verify scores steps and agent.oracles.MiniWobOracle solves them."""

_ENTRY = "envs.miniwob.env:MiniWobEnv"

for _task in TASKS:
    _description = "MiniWoB++: " + _task.replace("-", " ")
    if _task in TARGET_TASKS:
        _description += " (step-verifiable)"
    register(f"miniwob/{_task}", _ENTRY, "miniwob", _description, device_kind="web", task=_task,
             env_name=f"miniwob/{_task}", max_steps=DEFAULT_MAX_STEPS)

__all__ = ["SUPPORTED_BY_ORACLE", "TASKS", "MiniWobEnv", "html_root"]
