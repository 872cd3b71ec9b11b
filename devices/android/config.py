"""The Android device's settings (the ``[android]`` section of the agent's configuration)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_APP_ALIASES: tuple[tuple[str, str], ...] = (
    ("settings", "com.android.settings"),
    ("chrome", "com.android.chrome"),
    ("camera", "com.android.camera2"),
    ("contacts", "com.android.contacts"),
    ("phone", "com.android.dialer"),
    ("messages", "com.google.android.apps.messaging"),
    ("calendar", "com.google.android.calendar"),
    ("clock", "com.google.android.deskclock"),
    ("files", "com.google.android.documentsui"),
    ("play store", "com.android.vending"),
)


@dataclass(frozen=True, slots=True)
class AndroidConfig:
    serial: str = ""
    """Device serial (``adb devices``), e.g. emulator-5554 or 192.168.1.20:5555; empty = the only connected one."""
    adb_host: str = "127.0.0.1"
    """Host of the adb server."""
    adb_port: int = 5037
    """Port of the adb server (adb's ANDROID_ADB_SERVER_PORT)."""
    start_server: bool = True
    """Start a local adb server on ``adb_port`` when none is listening (as the adb command does)."""
    capture: str = "raw"
    """Frame capture: "raw" (uncompressed ``screencap``, fast) or "png" (``screencap -p``)."""
    keyboard: str = "auto"
    """Text entry: "auto" (ASCII by ``input text``, the rest by ADBKeyboard), "adbkeyboard" or "ascii"."""
    ime_switch_wait_s: float = 0.3
    """Seconds to let ADBKeyboard bind to the focused field after switching to it."""
    call_timeout_s: float = 20.0
    """Seconds any single ADB call may take before the phone counts as hung."""
    offline_deadline_s: float = 30.0
    """Seconds to keep retrying (and reconnecting) a phone that went offline before DeviceDisconnected."""
    drag_s: float = 0.6
    """Duration of a drag's swipe in seconds."""
    scroll_swipe_s: float = 0.5
    """Duration of each scroll swipe in seconds (slow swipes fling less)."""
    allow_black_frames: bool = False
    """Accept all-black frames (apps that really are black) instead of raising DeviceError."""
    app_aliases: tuple[tuple[str, str], ...] = DEFAULT_APP_ALIASES
    """(name, package or package/activity) pairs for open_app; names match case-insensitively."""

    def __post_init__(self) -> None:
        if self.capture not in ("raw", "png"):
            raise ValueError(f"android.capture={self.capture!r} must be 'raw' or 'png'")
        if self.keyboard not in ("auto", "adbkeyboard", "ascii"):
            raise ValueError(f"android.keyboard={self.keyboard!r} must be 'auto', 'adbkeyboard' or 'ascii'")
        if not 0 < self.adb_port < 65536:
            raise ValueError(f"android.adb_port={self.adb_port} is not a TCP port")
        if self.call_timeout_s <= 0 or self.offline_deadline_s < 0 or self.ime_switch_wait_s < 0:
            raise ValueError(
                "android timeouts must be positive seconds (offline_deadline_s and ime_switch_wait_s may be 0)"
            )
        if self.drag_s <= 0 or self.scroll_swipe_s <= 0:
            raise ValueError("android.drag_s and android.scroll_swipe_s must be positive seconds")
        for pair in self.app_aliases:
            if len(pair) != 2 or not all(isinstance(p, str) and p for p in pair):
                raise ValueError(f"android.app_aliases entries must be (name, package) pairs, got {pair!r}")
