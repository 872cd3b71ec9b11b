"""The X display: connecting to it, its monitors, grabbing frames, and the window under a point.

Frames come from ``mss`` (XShmGetImage) as BGRA and become RGB in one ``cv2.cvtColor`` over a
zero-copy view of mss's buffer (bench/capture.py on Xvfb: grab + convert 0.3-0.8 ms at 1280x800 and
~0.8 ms at 1920x1080, against 3.5 / 7.4 ms for numpy channel slicing with a copy and 52 / 102 ms for
``pyautogui.screenshot``, which goes through scrot and a PNG file). Observations carry no encoded
bytes: the recorder encodes the frame. The X-specific set-up pitfalls are handled in
``prepare_display``.
"""

from __future__ import annotations

import os
import struct
import tempfile
from typing import Any

import cv2
import numpy as np

from devices.base import Box
from devices.desktop.geometry import MonitorGeometry, ScreenMap
from devices.errors import DeviceUnavailable


def _xauth_field(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


_NO_AUTH_ENTRY = struct.pack(">H", 0xFFFE) + b"".join(map(_xauth_field, (b"handeye", b"none", b"handeye-none", b"")))
"""One Xauthority entry that matches no display: python-xlib then connects without a cookie (as with no file) but,
the file not being empty, does not print "Xlib.xauth: warning, no xauthority details available" to stdout."""


def prepare_display(display: str = "") -> str:
    """Make this process ready to talk to ``display`` (default $DISPLAY) and return its name.

    Raises DeviceUnavailable naming the display when there is none or it does not answer. Sets, for
    this process only: DISPLAY (pyautogui reads it when imported); XAUTHORITY to a file with one entry that
    matches no display when it is unset and ~/.Xauthority is missing (python-xlib raises XauthError without a file,
    and prints a warning with an empty one); and
    XDG_SESSION_TYPE=x11 (pyscreeze refuses to screenshot under any other value).
    """
    name = display or os.environ.get("DISPLAY", "")
    if not name:
        wayland = os.environ.get("WAYLAND_DISPLAY")
        hint = (
            f" This is a Wayland session ({wayland}): log into an X11 session, or drive XWayland by setting "
            "desktop.display (usually :0)."
            if wayland
            else ""
        )
        raise DeviceUnavailable(
            "no X display: DISPLAY is not set and desktop.display is empty. Run under Xvfb "
            "(`Xvfb :99 -screen 0 1280x800x24 -nolisten tcp &` then DISPLAY=:99, or `xvfb-run agent ...`) "
            "or set desktop.display." + hint
        )
    if not os.environ.get("XAUTHORITY") and not os.path.exists(os.path.expanduser("~/.Xauthority")):
        fd, path = tempfile.mkstemp(prefix="handeye-xauth-")
        with os.fdopen(fd, "wb") as f:
            f.write(_NO_AUTH_ENTRY)
        os.environ["XAUTHORITY"] = path
    if os.environ.get("XDG_SESSION_TYPE") != "x11":
        os.environ["XDG_SESSION_TYPE"] = "x11"
    try:
        from Xlib import display as xdisplay
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailable("python-xlib is not installed; run `make setup` or `pip install 'handeye[desktop]'`") from e
    try:
        conn = xdisplay.Display(name)
    except Exception as e:  # Xlib raises DisplayError, XauthError or OSError variants: all mean "no display"
        raise DeviceUnavailable(
            f"cannot connect to X display {name!r} ({type(e).__name__}: {e}). Is the X server running? Start "
            f"Xvfb (`Xvfb {name} -screen 0 1280x800x24 -nolisten tcp &`) or point desktop.display / DISPLAY at "
            "a running one; on Wayland use an X11 session or XWayland."
        ) from e
    conn.close()
    os.environ["DISPLAY"] = name
    return name


def monitors_of(sct: Any) -> list[MonitorGeometry]:
    """The monitors an mss instance sees, index 1 first (mss's 0, all monitors together, left out)."""
    return [
        MonitorGeometry(i, int(m["left"]), int(m["top"]), int(m["width"]), int(m["height"]))
        for i, m in enumerate(sct.monitors)
        if i > 0
    ]


def open_mss(display: str) -> Any:
    """An mss grabber on ``display``; DeviceUnavailable when mss is missing or cannot open it."""
    try:
        import mss
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailable("mss is not installed; run `make setup` or `pip install 'handeye[desktop]'`") from e
    try:
        return mss.MSS(display=display)
    except Exception as e:  # mss raises ScreenShotError for any X failure
        raise DeviceUnavailable(f"mss cannot open X display {display!r}: {e}") from e


def list_monitors(display: str = "") -> list[MonitorGeometry]:
    """The monitors of ``display`` (default $DISPLAY), index 1 first, for ``agent devices``."""
    name = prepare_display(display)
    with open_mss(name) as sct:
        return monitors_of(sct)


def same_display(a: str, b: str) -> bool:
    """Whether two display names denote the same display (":1" is ":1.0")."""
    norm = lambda s: s if "." in s.rsplit(":", 1)[-1] else s + ".0"  # noqa: E731
    return norm(a) == norm(b)


def socket_path(display: str) -> str:
    """The Unix socket of a local X display (":99" -> /tmp/.X11-unix/X99)."""
    number = display.rsplit(":", 1)[-1].split(".")[0]
    return f"/tmp/.X11-unix/X{number}"


def grab_rgb(sct: Any, mon: MonitorGeometry) -> np.ndarray:
    """The monitor as an RGB frame: one cvtColor over a zero-copy view of mss's BGRA buffer."""
    shot = sct.grab({"left": mon.left, "top": mon.top, "width": mon.width, "height": mon.height})
    bgra = np.frombuffer(shot.raw, np.uint8).reshape(shot.height, shot.width, 4)
    return cv2.cvtColor(bgra, cv2.COLOR_BGRA2RGB)


def window_at(conn: Any, screen: ScreenMap, xy: tuple[int, int]) -> tuple[dict[str, Any] | None, Box | None]:
    """The top-level window under the input point: its X id, name and class, and its box in the frame."""
    from Xlib import X
    from Xlib import error as xerror

    root = conn.screen().root
    try:
        child = root.translate_coords(root, *xy).child
    except xerror.XError:
        return None, None
    if not child or child == X.NONE:
        return None, None
    return window_info(conn, screen, child)


def window_info(conn: Any, screen: ScreenMap, window: Any) -> tuple[dict[str, Any] | None, Box | None]:
    """A top-level window's X id, name and class, and its box in the frame; (None, None) if it went away.

    Under a window manager the top-level window is the manager's frame, which has no name: the name
    and class are then the application window's inside it (the one with WM_STATE).
    """
    from Xlib import X
    from Xlib import error as xerror

    root = conn.screen().root
    try:
        named = _client_of(conn, window)
        name = named.get_wm_name()
        if not name:
            prop = named.get_full_property(conn.intern_atom("_NET_WM_NAME"), X.AnyPropertyType)
            value = prop.value if prop is not None else None  # python-xlib gives str or bytes by the property's type
            name = value.decode(errors="replace") if isinstance(value, bytes) else value
        wm_class = named.get_wm_class()
        geo = window.get_geometry()
        origin = window.translate_coords(root, 0, 0)
    except xerror.XError:
        return None, None  # the window went away in between: not worth failing the action for
    x1, y1 = screen.to_frame(-origin.x, -origin.y)
    x2, y2 = screen.to_frame(-origin.x + geo.width, -origin.y + geo.height)
    target = {
        "window": hex(window.id),
        "name": name.decode(errors="replace") if isinstance(name, bytes) else name,
        "class": list(wm_class) if wm_class else None,
    }
    return target, Box(x1, y1, x2, y2).clipped()


def _client_of(conn: Any, window: Any, depth: int = 2) -> Any:
    """The application window in a top-level window: itself if it has a name (no window manager) or
    WM_STATE, else the first descendant ``depth`` levels down that has WM_STATE, else itself."""
    wm_state = conn.intern_atom("WM_STATE")
    if window.get_wm_name() or window.get_full_property(wm_state, 0) is not None:
        return window
    level = window.query_tree().children
    for _ in range(depth):
        for w in level:
            if w.get_full_property(wm_state, 0) is not None:
                return w
        level = [c for w in level for c in w.query_tree().children]
    return window


def focused_window(conn: Any) -> Any:
    """The top-level window with the keyboard focus (the one under the pointer when focus follows it), or None."""
    root = conn.screen().root
    focus = conn.get_input_focus().focus
    if isinstance(focus, int):  # None or PointerRoot: keys go to the window under the pointer
        focus = root.query_pointer().child
        if isinstance(focus, int):
            return None
    while True:
        parent = focus.query_tree().parent
        if isinstance(parent, int) or parent.id == root.id:
            return None if focus.id == root.id else focus
        focus = parent
