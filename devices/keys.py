"""Canonical key names (the W3C ``KeyboardEvent.key`` names that Playwright uses) and their aliases."""

from __future__ import annotations

from devices.errors import InvalidAction

_NAMED = [
    "Enter", "Tab", "Escape", "Backspace", "Delete", "Insert", "Home", "End", "PageUp", "PageDown",
    "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Space",
    "Control", "Shift", "Alt", "Meta", "CapsLock", "AppSwitch",
    *[f"F{i}" for i in range(1, 13)],
]
_ALIASES = {
    "return": "Enter", "esc": "Escape", "del": "Delete", "ins": "Insert", "pgup": "PageUp",
    "pgdn": "PageDown", "pagedown": "PageDown", "pageup": "PageUp", "up": "ArrowUp", "down": "ArrowDown",
    "left": "ArrowLeft", "right": "ArrowRight", "ctrl": "Control", "control": "Control", "cmd": "Meta",
    "command": "Meta", "win": "Meta", "super": "Meta", "meta": "Meta", "option": "Alt", "opt": "Alt",
    "space": "Space", " ": "Space", "spacebar": "Space", "backspace": "Backspace", "enter": "Enter",
    "tab": "Tab", "escape": "Escape", "delete": "Delete", "shift": "Shift", "alt": "Alt",
    "recent": "AppSwitch", "recents": "AppSwitch", "recent_apps": "AppSwitch", "app_switch": "AppSwitch",
    "overview": "AppSwitch",
}
#: keys only phones have; a device without them raises UnsupportedAction instead of ignoring them
PHONE_ONLY_KEYS = frozenset({"AppSwitch"})

_BY_LOWER = {name.lower(): name for name in _NAMED} | _ALIASES


def normalize_key(name: str) -> str:
    """Map a key name or alias ("ctrl", "Return", "a") to its canonical form ("Control", "Enter", "a")."""
    if not isinstance(name, str) or not name:
        raise InvalidAction(f"a key name must be a non-empty string, got {name!r}")
    if len(name) == 1:
        return name
    canonical = _BY_LOWER.get(name.strip().lower())
    if canonical is None:
        raise InvalidAction(
            f"unknown key {name!r}; use a single character or one of: {', '.join(_NAMED)} "
            "(aliases such as ctrl, cmd, esc, return are accepted)"
        )
    return canonical
