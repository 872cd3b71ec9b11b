"""The web device's settings, its recorder's, and the URLs it may open (``devices/web/device.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from devices.errors import NavigationError
from devices.keys import normalize_key

URL_SCHEMES = ("http", "https", "file", "about", "data")


@dataclass(frozen=True, slots=True)
class WebConfig:
    browser_path: str = ""
    """Chromium/Chrome executable; empty = Playwright's browser if installed, else the system's."""
    headless: bool = True
    """Run the browser without a window."""
    viewport_width: int = 1280
    """Viewport width in CSS pixels."""
    viewport_height: int = 720
    """Viewport height in CSS pixels."""
    device_scale_factor: float = 1.0
    """Device pixel ratio of the emulated screen (2 for a HiDPI laptop or a phone)."""
    frame_scale: str = "device"
    """Frame resolution: "device" (CSS size x device pixel ratio) or "css" (CSS size)."""
    locale: str = "en-US"
    """Browser locale (Accept-Language, navigator.language)."""
    navigation_timeout_s: float = 20.0
    """Seconds to wait for a page to load before the URL counts as unreachable."""
    action_timeout_s: float = 10.0
    """Seconds any single browser call may take before the device counts as hung."""
    extra_args: tuple[str, ...] = ()
    """Extra Chromium command-line flags."""

    def __post_init__(self) -> None:
        if not (100 <= self.viewport_width <= 8192 and 100 <= self.viewport_height <= 8192):
            raise ValueError(
                f"web viewport {self.viewport_width}x{self.viewport_height} is out of range; use 100..8192 CSS pixels"
            )
        if not 0.5 <= self.device_scale_factor <= 4:
            raise ValueError(f"web.device_scale_factor={self.device_scale_factor} must be between 0.5 and 4")
        if self.frame_scale not in ("device", "css"):
            raise ValueError(f"web.frame_scale={self.frame_scale!r} must be 'device' or 'css'")
        if self.navigation_timeout_s <= 0 or self.action_timeout_s <= 0:
            raise ValueError("web timeouts must be positive seconds")


MODIFIERS = frozenset({"Control", "Alt", "Shift", "Meta"})


def check_hotkey(text: str, what: str) -> frozenset[str]:
    """``"Control+Alt+p"`` as its canonical key names; ValueError naming ``what`` unless it is modifiers and one
    key (a key alone would be typing)."""
    try:
        names = [normalize_key(k) for k in str(text).replace(" ", "").split("+") if k]
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if sum(n not in MODIFIERS for n in names) != 1 or not any(n in MODIFIERS for n in names):
        raise ValueError(f"{what}={text!r} must be modifiers (Control, Alt, Shift, Meta) and one key, e.g. "
                         "Control+Alt+p: a key alone would be recorded as typing")
    return frozenset(n.lower() for n in names)


@dataclass(frozen=True, slots=True)
class WebRecordConfig:
    """How ``agent record`` reads a person in the browser (``WebRecorder``): its pause and stop keys."""

    pause_key: str = "Control+Alt+p"
    """Pauses recording; pressed again, resumes (the gap is one wait step with paused_s): modifiers and one key."""
    stop_key: str = "Control+Alt+s"
    """Ends the recording: the person says the task is done."""

    def __post_init__(self) -> None:
        if check_hotkey(self.pause_key, "pause_key") == check_hotkey(self.stop_key, "stop_key"):
            raise ValueError(f"the pause and stop keys are both {self.stop_key}; choose two")


def check_url(url: str) -> str:
    """The URL if a browser can open it, else NavigationError saying what is wrong."""
    scheme = urlparse(url).scheme.lower()
    if scheme not in URL_SCHEMES:
        raise NavigationError(
            f"cannot open {url!r}: the URL needs one of the schemes {', '.join(URL_SCHEMES)} "
            "(for example https://example.com)"
        )
    return url
