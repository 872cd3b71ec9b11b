"""The web device kind: a Chromium page through Playwright (``devices.registry``'s entry)."""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata
from typing import Any

from devices.registry import DeviceKindSpec, RecordOptions, Requirement, register_kind
from devices.settle import SettleConfig
from devices.web import WEB_ACTIONS
from devices.web.config import WebConfig, WebRecordConfig

WEB_SUMMARY = "The web device (Chromium through Playwright)."


def _build(section: WebConfig, settle: SettleConfig, *, url: str = "") -> Any:
    from devices.web import PlaywrightDevice

    return PlaywrightDevice(section, settle, url=url or None)


def _recorder(section: WebConfig, settle: SettleConfig, options: RecordOptions) -> Any:
    from devices.web import PlaywrightDevice, check_url
    from devices.web.recorder import WebRecorder

    keys = options.settings or WebRecordConfig()
    keys = replace(keys, pause_key=options.pause_key or keys.pause_key, stop_key=options.stop_key or keys.stop_key)
    device = PlaywrightDevice(replace(section, headless=options.headless), settle)
    return WebRecorder(device, check_url(options.url), pause_key=keys.pause_key, stop_key=keys.stop_key)


def _screens(section: WebConfig) -> list[str]:
    from devices.web.browser import find_browser

    return [find_browser(section.browser_path)]


def _requirements() -> list[Requirement]:
    """Playwright, a Chromium and a CJK font: the default device's parts, so each is required."""
    from devices.web.browser import find_browser, has_cjk_font
    from devices.errors import DeviceUnavailable

    try:
        import playwright  # noqa: F401
    except ImportError:
        found = [Requirement("playwright", False, "pip install 'handeye[web]'", required=True)]
    else:
        found = [Requirement("playwright", True, metadata.version("playwright"), required=True)]
    try:
        found.append(Requirement("browser", True, find_browser(), required=True))
    except DeviceUnavailable as e:
        found.append(Requirement("browser", False, str(e), required=True))
    cjk = has_cjk_font()
    found.append(Requirement("CJK font", cjk, "found" if cjk else "install fonts-noto-cjk" if cjk is False
                             else "fc-list not available", required=True))
    return found


WEB = register_kind(DeviceKindSpec(
    name="web", summary=WEB_SUMMARY, config=WebConfig, build=_build, actions=WEB_ACTIONS, screens=_screens,
    requirements=_requirements, recorder=_recorder, record_config=WebRecordConfig, opens_url=True))
