"""The desktop device's settings (the ``[desktop]`` section of the agent's configuration)."""

from __future__ import annotations

from dataclasses import dataclass, field

TYPING_METHODS = ("auto", "xdotool", "clipboard", "keys")


@dataclass(frozen=True, slots=True)
class DesktopConfig:
    display: str = ""
    """X display to drive, e.g. ":99"; empty = $DISPLAY."""
    monitor: int = 1
    """mss monitor index: 1 = the first (primary) monitor, 2 = the next; 0 (all monitors) is not allowed."""
    failsafe: bool = True
    """Keep pyautogui's fail-safe: a person moving the mouse into a screen corner stops the device."""
    typing: str = "auto"
    """How text is typed: "xdotool", "clipboard" (xclip + Ctrl+V), "keys" (ASCII key presses), or
    "auto" = xdotool when installed, else the clipboard, else keys."""
    type_delay_ms: int = 12
    """Milliseconds between characters typed by xdotool (its own default; lower drops characters)."""
    paste_keys: tuple[str, ...] = ("Control", "v")
    """Hotkey that pastes when typing goes through the clipboard (terminals want Control+Shift+v)."""
    move_duration_s: float = 0.0
    """Seconds each pointer move takes (0 = jump; pyautogui treats anything under 0.1 as a jump)."""
    drag_duration_s: float = 0.25
    """Seconds the pointer takes from a drag's start to its end, with the button held."""
    scroll_click_px: float = 120.0
    """Logical pixels one wheel click is taken to scroll: clicks = round(amount * monitor height / this),
    at least 1. Applications differ (GTK and Chromium scroll roughly 50-120 px, a Tk list 5 lines)."""
    scale_override: float | None = field(default=None, metadata={"was": 0.0})
    """Frame pixels per input unit for a uniformly scaled (HiDPI) desktop; unset = measured (1 on X11)."""
    settle_grab_interval_s: float = 0.04
    """Least seconds between two settle grabs. A grab takes about a millisecond, so back-to-back grabs
    would call a screen still after 2 ms; apps redraw at 60 Hz or slower and animate in steps of up to
    ~50 ms, so with settle.stable_frames = 2 the screen must stay still for at least 80 ms."""
    action_timeout_s: float = 30.0
    """Seconds one action (typing excluded: it gets this plus its own time) may take before DeviceTimeout."""

    def __post_init__(self) -> None:
        if isinstance(self.monitor, bool) or not isinstance(self.monitor, int) or self.monitor < 1:
            raise ValueError(
                f"desktop.monitor={self.monitor!r} must be an mss monitor index >= 1 (1 = primary); "
                "0 means all monitors together, which cannot be one device"
            )
        if self.typing not in TYPING_METHODS:
            raise ValueError(f"desktop.typing={self.typing!r} must be one of {', '.join(TYPING_METHODS)}")
        if self.scale_override is not None and not 0.5 <= self.scale_override <= 4:
            raise ValueError(f"desktop.scale_override={self.scale_override} must be in 0.5..4 (unset: measured)")
        if self.move_duration_s < 0 or self.drag_duration_s < 0 or self.type_delay_ms < 0:
            raise ValueError("desktop durations and delays must be >= 0")
        if self.settle_grab_interval_s < 0:
            raise ValueError("desktop.settle_grab_interval_s must be >= 0")
        if self.scroll_click_px <= 0 or self.action_timeout_s <= 0:
            raise ValueError("desktop.scroll_click_px and desktop.action_timeout_s must be positive")
        if not self.paste_keys:
            raise ValueError("desktop.paste_keys must name at least one key")
