"""Finding a recorded element again on a live page (``agent replay``): by the CSS selector the web recorder stored,
in the frame it was in, into shadow roots, with its box in the frame's normalized coordinates and its accessible
name as the recorder computes it.

    found = await locate(device, "#widget >>> #inner", frame_url="")
    found.box.center, found.name, found.focused

The selector is the recorder's own (``devices/web/recorder_script.py``): one CSS selector per tree scope, joined by
``' >>> '`` where it enters a shadow root. The name follows the recorder's rules (aria-label, aria-labelledby, the
label, a select's chosen option, the visible text, a button's value, placeholder / title / alt) so that a replay can
tell whether the element it found is the one the person touched. The box is Playwright's ``bounding_box`` (the
border box relative to the top page's viewport, child frames included) mapped through the visual viewport as the
web device maps action points (docs/actions.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from devices.base import Box
from devices.web.device import PlaywrightDevice

log = logging.getLogger(__name__)

FIND_JS = r"""
(sel) => {
  let root = document, el = null;
  for (const part of sel.split(' >>> ')) {
    try { el = root.querySelector(part); } catch (e) { return null; }
    if (!el) return null;
    root = el.shadowRoot || el;
  }
  return el;
}
"""

# The recorder's name() (devices/web/recorder_script.py), kept identical so that names compare.
DESCRIBE_JS = r"""
(el) => {
  const isPassword = (e) => e.tagName === 'INPUT' && (e.type || '').toLowerCase() === 'password';
  const name = (e) => {
    const aria = e.getAttribute('aria-label');
    if (aria) return aria;
    const by = e.getAttribute('aria-labelledby');
    if (by) { const l = e.ownerDocument.getElementById(by); if (l) return l.innerText; }
    if (e.labels && e.labels.length) return e.labels[0].innerText;
    if (e.tagName === 'SELECT') return (e.selectedOptions[0] || {}).label || '';
    const text = (e.innerText || '').trim();
    if (text) return text;
    if (!isPassword(e) && e.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(e.type)) return e.value;
    return e.getAttribute('placeholder') || e.getAttribute('title') || e.getAttribute('alt') || '';
  };
  let active = document.activeElement;
  while (active && active.shadowRoot && active.shadowRoot.activeElement) active = active.shadowRoot.activeElement;
  const whole = el === document.documentElement || el === document.body;
  return {tag: el.tagName.toLowerCase(), name: whole ? '' : name(el).trim().slice(0, 120),
          password: isPassword(el), focused: active === el};
}
"""

VIEWPORT_JS = "() => { const v = window.visualViewport; return [v.offsetLeft, v.offsetTop, v.width, v.height]; }"


@dataclass(frozen=True, slots=True)
class LocatedElement:
    """A recorded element found again: where it is now and what it is called."""

    box: Box | None
    """Normalized to the frame (the visual viewport), clipped to it; None when it has no layout box (hidden)."""
    name: str
    tag: str
    focused: bool
    """It holds the keyboard focus now."""
    visible: bool
    """Some of it is on screen (the centre of its visible part is where a replay clicks)."""


async def locate(device: PlaywrightDevice, selector: str, frame_url: str = "") -> LocatedElement | None:
    """The element ``selector`` names in the frame whose URL is ``frame_url`` (the main frame when empty), or None
    when the frame or the element is not there (or the page went away while looking)."""
    page = device.page
    frame = page.main_frame
    if frame_url:
        frame = next((f for f in page.frames if f.url == frame_url), None)
        if frame is None:
            return None
    try:
        handle = await frame.evaluate_handle(FIND_JS, selector)
        element = handle.as_element()
        if element is None:
            return None
        described = await element.evaluate(DESCRIBE_JS)
        css = await element.bounding_box()
        view = await page.evaluate(VIEWPORT_JS)
    except Exception as e:  # a navigation replaced the document, the page closed: not found now
        log.debug("could not look for %s: %s", selector, e)
        return None
    box = visible = None
    if css and css["width"] > 0 and css["height"] > 0:
        ox, oy, w, h = (float(v) for v in view)
        raw = Box((css["x"] - ox) / w, (css["y"] - oy) / h, (css["x"] + css["width"] - ox) / w,
                  (css["y"] + css["height"] - oy) / h)
        box = raw.clipped()
        visible = box.x2 > box.x1 and box.y2 > box.y1
    return LocatedElement(box, str(described.get("name") or ""), str(described.get("tag") or ""),
                          bool(described.get("focused")), bool(visible))


def centre_of(found: LocatedElement | None) -> tuple[float, float] | None:
    """The centre of a located element's visible part, or None when it is off screen or not found."""
    if found is None or found.box is None or not found.visible:
        return None
    return found.box.center
