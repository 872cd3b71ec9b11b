"""The desktop recorder's settings: frame capture, how raw input groups into actions, the pause and stop keys."""

from __future__ import annotations

from dataclasses import dataclass

from devices.desktop.xkeys import HOTKEY_ORDER
from devices.keys import normalize_key


@dataclass(frozen=True, slots=True)
class Combo:
    """A hotkey to watch for: held modifiers and one key (lower case)."""

    modifiers: frozenset[str]
    key: str

    def describe(self) -> str:
        return "+".join([m for m in HOTKEY_ORDER if m in self.modifiers] + [self.key])


def parse_combo(keys: tuple[str, ...] | str, what: str) -> Combo:
    """``("Control", "Alt", "p")`` or ``"ctrl+alt+p"`` as a Combo; ValueError naming ``what`` otherwise."""
    parts = tuple(keys.split("+")) if isinstance(keys, str) else tuple(keys)
    try:
        names = [normalize_key(k) for k in parts]
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    mods = [n for n in names if n in HOTKEY_ORDER]
    rest = [n for n in names if n not in HOTKEY_ORDER]
    if len(rest) != 1 or not mods:
        raise ValueError(f"{what}={'+'.join(parts)!r} must be modifiers (Control, Alt, Shift, Meta) and one key, "
                         "e.g. ctrl+alt+p: a key alone would be recorded as typing")
    return Combo(frozenset(mods), rest[0].lower())


@dataclass(frozen=True, slots=True)
class DesktopRecordConfig:
    """How the desktop recorder captures frames and reads input (``DesktopRecorder(config, record_config)``)."""

    fps: float = 25.0
    """Frames per second of the rolling capture (an mss grab of the monitor takes about a millisecond)."""
    ring_frames: int = 8
    """Frames kept: enough to cover the time from an input event to the recorder seeing it under load."""
    double_click_s: float = 0.4
    """Two clicks whose presses are this close in time (GTK's default; Xt's is 0.2) are a double click."""
    double_click_px: int = 5
    """... and this close in space (pixels either way)."""
    drag_px: int = 5
    """A press that moves further than this before its release is a drag."""
    long_press_s: float = 0.8
    """A left press held this long without moving is a long press."""
    scroll_gap_s: float = 0.5
    """Wheel clicks in one direction with gaps under this are one scroll."""
    type_idle_s: float = 1.5
    """Typed text is committed as one type action after this long without a key (or on Enter, Tab, a
    click, a hotkey or a focus change)."""
    pause_keys: tuple[str, ...] | str = ("Control", "Alt", "p")
    """Pauses recording; pressed again, resumes (the gap is one wait step with paused_s): modifiers and one key, as a
    list of key names or "ctrl+alt+p"."""
    stop_keys: tuple[str, ...] | str = ("Control", "Alt", "s")
    """Ends the recording: the person says the task is done (written as pause_keys is)."""
    accessibility: bool = True
    """Ask the accessibility tree (AT-SPI) for the element under a click, where it is available."""
    mask_text: bool = False
    """Write every typed text masked (for a desktop whose password fields cannot be told apart)."""

    def __post_init__(self) -> None:
        if not 1 <= self.fps <= 120:
            raise ValueError(f"fps={self.fps} must be in 1..120")
        if self.ring_frames < 2:
            raise ValueError(f"ring_frames={self.ring_frames} must be at least 2")
        for name in ("double_click_s", "long_press_s", "scroll_gap_s", "type_idle_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        if self.double_click_px < 0 or self.drag_px < 0:
            raise ValueError("double_click_px and drag_px must be >= 0")
        if self.pause_combo == self.stop_combo:
            raise ValueError(f"the pause and stop keys are both {self.stop_combo.describe()}; choose two")

    @property
    def pause_combo(self) -> Combo:
        return parse_combo(self.pause_keys, "pause_keys")

    @property
    def stop_combo(self) -> Combo:
        return parse_combo(self.stop_keys, "stop_keys")
