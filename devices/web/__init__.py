"""The web device: one Chromium page driven through Playwright.

    config    WebConfig: the ``[web]`` settings, and the URLs the device may open (check_url, URL_SCHEMES)
    browser   finding a Chromium to drive (the configured path, Playwright's download, the system's) and a CJK font
    scripts   the JavaScript the device runs in pages (the viewport, the element under a point, the focus)
    device    PlaywrightDevice: frames over the DevTools protocol, the coordinate contract, the actions
    processes the browser's process group and Playwright's driver, killed when a close hangs or is cancelled

Recording a person (docs/recording.md, "Web"):

    recorder         WebRecorder: the listener's reports and the screencast's frames as DemoEvents
    recorder_script  the listener run in every page and frame
    listen           where it runs: an isolated world of every frame, out of the page's reach
    interpret        raw browser input turned into unified actions (pure)

Replaying a recording:

    locate    the element a recorded selector names, now, with its box and name

Playwright is imported when the device starts, not here. docs/devices.md (Web) describes the device for users.
"""

from devices.web.config import URL_SCHEMES, WebConfig, check_url
from devices.web.device import WEB_ACTIONS, PlaywrightDevice

__all__ = ["URL_SCHEMES", "WEB_ACTIONS", "PlaywrightDevice", "WebConfig", "check_url"]
