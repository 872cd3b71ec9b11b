"""The web recorder against a hostile page, on a real Chromium: the page's scripts, in its main frame, a same-origin
iframe and a cross-origin (out-of-process) iframe, try every way they have to write the person's demonstration (call
any recorder-like function they can find, replace it, dispatch synthetic input with the stop key among it, fill a
field by script, change what the person typed as they leave the field, stop the person's events in its own capture
handlers), while the person (Playwright's trusted input) does the task. The recording must be the person's,
action by action; and the person's own odd input (a key with no name in the action space) must be refused, counted
and skipped, never the end of the recording."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from agent.record import record_demonstration
from devices.actions import ActionKind
from devices.web import PlaywrightDevice, WebConfig
from devices.web.interpret import RECORDER_KINDS, Interpreter, RawReport, check_report
from devices.web.recorder import WebRecorder
from envs.recording import RecordingEnv
from envs.records import Actor, Outcome
from envs.trajectory import RunWriter, read_episode

W, H = 800, 600

# Run by every frame of the hostile site, as the page's own script (the main world).
HOSTILE = r"""<script>
(() => {
  window.__attacks = 0;
  const forged = (kind, extra) => Object.assign({kind, t: Date.now(), x: 5, y: 5, button: 0, count: 1,
      target: {tag: 'button', role: '', name: 'FORGED', selector: '#forged', password: false, box: [0, 0, 50, 50]},
      pw: [], vw: 800, vh: 600, url: location.href}, extra || {});
  const stop = {key: 's', ctrl: true, alt: true, meta: false, shift: false};
  const reports = () => [forged('down'), forged('up'), forged('click'), forged('context'),
      forged('typed', {text: 'FORGED-TEXT', before: '', reason: 'blur'}), forged('char', {key: 'q'}),
      forged('key', {key: 'p', ctrl: true, alt: true, meta: false, shift: false}), forged('key', stop),
      forged('key', {key: 'NoSuchKey', ctrl: true}), forged('down', {x: NaN}), forged('click', {target: {box: 'x'}})];
  const names = () => {
    const out = new Set(['__handeyeRecord', '__handeyeReport', '__handeyeRecorder', 'handeyeRecord']);
    for (const n of Object.getOwnPropertyNames(window))
      if (/handeye|record|report|binding|playwright|__pw|cdp/i.test(n)) out.add(n);
    return [...out];
  };
  const callEverything = () => {
    for (const n of names()) {
      let f;
      try { f = window[n]; } catch (e) { continue; }
      if (typeof f === 'function')
        for (const r of reports()) for (const arg of [r, JSON.stringify(r)]) { try { f(arg); } catch (e) {} }
      try { window[n] = () => {}; } catch (e) {}  // and replace it: the recorder would hear nothing more
      try { Object.defineProperty(window, n, {value: () => {}, writable: false}); } catch (e) {}
    }
  };
  const synthetic = () => {
    for (const t of [window, document, document.body, document.activeElement].filter(Boolean)) {
      for (const key of ['s', 'S', 'p'])
        t.dispatchEvent(new KeyboardEvent('keydown', {key, code: 'Key' + key.toUpperCase(), ctrlKey: true,
                                                      altKey: true, bubbles: true, composed: true}));
      for (const type of ['pointerdown', 'pointerup'])
        t.dispatchEvent(new PointerEvent(type, {clientX: 7, clientY: 7, button: 0, bubbles: true, composed: true}));
      t.dispatchEvent(new MouseEvent('click', {clientX: 7, clientY: 7, detail: 1, bubbles: true}));
      t.dispatchEvent(new MouseEvent('contextmenu', {clientX: 7, clientY: 7, bubbles: true}));
      t.dispatchEvent(new WheelEvent('wheel', {deltaY: 500, clientX: 7, clientY: 7, bubbles: true}));
      t.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));
    }
    const b = document.querySelector('button');
    if (b) b.click();
    const sel = document.querySelector('select');
    if (sel) { sel.value = 'forged'; sel.dispatchEvent(new Event('change', {bubbles: true})); }
  };
  const fillByScript = () => {  // typing nobody did: focus a field, fill it, leave it
    const f = document.querySelector('input.bait');
    if (!f) return;
    f.focus();
    f.dispatchEvent(new InputEvent('beforeinput', {data: 'x', inputType: 'insertText', bubbles: true}));
    f.value = 'FORGED-FIELD-' + window.__attacks;
    f.dispatchEvent(new InputEvent('input', {data: 'x', inputType: 'insertText', bubbles: true}));
    f.blur();
  };
  const attack = () => { window.__attacks++; callEverything(); synthetic(); };
  // The page's own capture handlers: attack on each of the person's presses (filling the bait before the press
  // moves the focus where the person meant it), and try to hide the press from anyone listening after them.
  for (const type of ['pointerdown', 'pointerup', 'click', 'keydown'])
    window.addEventListener(type, (e) => {
      if (!e.isTrusted) return;
      attack();
      if (type === 'pointerdown') fillByScript();
      e.stopImmediatePropagation();
    }, true);
  // and change what the person typed as they leave the field, before anyone listening after it reads it
  window.addEventListener('focusout', (e) => { const el = e.target; if (el && el.id) el.value += ' FORGED-ON-LEAVE'; },
                          true);
  fillByScript();
  attack();
  const timer = setInterval(attack, 100);
  setTimeout(() => clearInterval(timer), 15000);
})();
</script>"""

MAIN = f"""<!doctype html><html><head><meta charset="utf-8"></head><body style="margin:0;font:16px sans-serif">
<button id="ok" style="position:absolute;left:40px;top:40px;width:160px;height:40px">OK</button>
<input class="bait" aria-label="Bait" style="position:absolute;left:40px;top:100px;width:200px;height:30px">
<select style="position:absolute;left:40px;top:150px"><option>a</option><option value="forged">forged</option></select>
<iframe id="same" src="same.html" style="position:absolute;left:300px;top:20px;width:400px;height:150px;border:3px solid #888"></iframe>
<iframe id="cross" src="CROSS/cross.html" style="position:absolute;left:300px;top:230px;width:420px;height:220px;border:5px solid #448;padding:6px"></iframe>
{HOSTILE}</body></html>"""

SAME = f"""<!doctype html><html><body style="margin:0">
<button id="fbtn" style="position:absolute;left:20px;top:20px;width:140px;height:40px">Same origin</button>
<input class="bait" aria-label="Bait" style="position:absolute;left:20px;top:80px;width:200px;height:30px">
{HOSTILE}</body></html>"""

CROSS = f"""<!doctype html><html><body style="margin:0">
<button id="xbtn" style="position:absolute;left:30px;top:25px;width:150px;height:40px">Cross origin</button>
<input id="xinput" aria-label="Cross field" style="position:absolute;left:30px;top:100px;width:220px;height:30px">
<input class="bait" aria-label="Bait" style="position:absolute;left:30px;top:160px;width:200px;height:30px">
{HOSTILE}</body></html>"""


@pytest.fixture
def hostile(site, pages_dir: Path):
    cross_origin = site.url("").replace("127.0.0.1", "localhost").rstrip("/")  # another site: its own process
    (pages_dir / "main.html").write_text(MAIN.replace("CROSS", cross_origin), encoding="utf-8")
    (pages_dir / "same.html").write_text(SAME, encoding="utf-8")
    (pages_dir / "cross.html").write_text(CROSS, encoding="utf-8")
    return site


def _centre(box):
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


async def _person(recorder: WebRecorder) -> list[tuple[str, float | None, float | None, str]]:
    """The person's task, with trusted input, in all three frames; returns what was done."""
    page = recorder.device.page
    same, cross = page.frame_locator("#same"), page.frame_locator("#cross")
    done = []

    async def click(locator, name):
        x, y = _centre(await locator.bounding_box())
        await page.mouse.click(x, y)
        done.append(("click", x, y, name))
        await asyncio.sleep(0.6)  # past the double-click window

    await click(page.locator("#ok"), "#ok")
    await click(same.locator("#fbtn"), "#fbtn")
    await click(cross.locator("#xbtn"), "#xbtn")
    await click(cross.locator("#xinput"), "#xinput")
    await page.keyboard.type("real text")
    await click(page.locator("#ok"), "#ok")  # leaving the field commits its typing before this click
    done.insert(-1, ("type", None, None, "real text"))
    await page.keyboard.press("Control+Alt+s")
    return done


def test_a_hostile_page_in_every_frame_cannot_write_the_demonstration(tmp_path, hostile):
    device = PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H))
    recorder = WebRecorder(device, hostile.url("main.html"))
    writer = RunWriter(tmp_path / "runs", config={}).episode(task="press the buttons", actor=Actor.HUMAN)
    env = RecordingEnv(recorder, "press the buttons")

    async def main():
        task = asyncio.create_task(record_demonstration(env, writer))
        await asyncio.wait_for(recorder.started.wait(), 30)
        page = device.page
        cross = next(f for f in page.frames if f.url.endswith("cross.html"))
        oopif = await page.context.new_cdp_session(cross)  # Playwright opens one only for an out-of-process frame
        await oopif.detach()
        done = await _person(recorder)
        result = await asyncio.wait_for(task, 30)
        attacks = [await f.evaluate("window.__attacks") for f in page.frames]
        await env.close()
        return done, result, attacks

    done, result, attacks = asyncio.run(main())
    assert len(attacks) == 3 and all(n > 0 for n in attacks), attacks  # every frame attacked
    assert result.record.outcome is Outcome.CLAIMED
    episode = read_episode(writer.path)
    steps = episode.steps[:-1]
    assert episode.steps[-1].action["kind"] == "finish"
    assert [s.action["kind"] for s in steps] == [d[0] for d in done], [s.action for s in steps]
    for step, (kind, x, y, name) in zip(steps, done):
        demo = step.info["env_info"]["demo"]
        if kind == "click":
            assert step.action["point"] == pytest.approx([x / W, y / H], abs=1.5 / W), name
            box = step.target_box
            assert box is not None and box[0] <= x / W <= box[2] and box[1] <= y / H <= box[3], (name, box)
            assert demo["selector"] == name
        else:
            assert step.action["text"] == name
    assert steps[2].info["env_info"]["demo"]["frame"].startswith("http://localhost:")  # the cross-origin frame's
    on_disk = "".join(p.read_text(encoding="utf-8") for p in episode.path.glob("*.json*"))
    assert "FORGED" not in on_disk and "#forged" not in on_disk
    assert episode.record.env["recorder"]["refused"] == 0  # nothing the page did even reached the recorder


def test_the_persons_key_with_no_name_is_refused_counted_and_the_recording_goes_on(tmp_path, site, pages_dir,
                                                                                    monkeypatch, capsys):
    """A key the action space has no name for (a media key, with a modifier so it is not typing) used to end the
    recording as claimed, exit 0, while the person carried on; now it is refused and counted, the steps after it are
    recorded, and `agent record` and the episode record say how many reports were refused."""
    from agent.cli import main as agent_main
    from envs.trajectory import iter_episodes
    from tests.support.person import play_once_started

    (pages_dir / "main.html").write_text(
        '<button id="ok" style="position:absolute;left:40px;top:40px;width:160px;height:40px">OK</button>')

    async def play(recorder: WebRecorder) -> None:
        page = recorder.device.page
        ok = _centre(await page.locator("#ok").bounding_box())
        await page.mouse.click(*ok)
        await asyncio.sleep(0.6)
        await page.keyboard.press("Control+MediaPlayPause")
        await page.keyboard.press("AudioVolumeUp")
        await page.mouse.click(*ok)
        await asyncio.sleep(0.6)
        await page.keyboard.press("Control+Alt+s")

    errors = play_once_started(monkeypatch, play)
    code = agent_main(["record", "Press OK twice", "--url", site.url("main.html"), "--headless", "--runs-dir",
                       str(tmp_path)])
    out = " ".join(capsys.readouterr().out.split())
    assert not errors and code == 0, (errors, out)
    (run_dir,) = [d for d in tmp_path.iterdir() if (d / "run.json").exists()]
    (episode,) = iter_episodes(run_dir)
    assert episode.record.outcome is Outcome.CLAIMED
    assert [s.action["kind"] for s in episode.steps] == ["click", "click", "finish"]
    recorder = episode.record.env["recorder"]
    assert recorder["refused"] == 2 and recorder["refused_by_kind"] == {"key": 2}
    assert "refused: 2 input reports (key 2;" in out, out


def test_a_load_the_page_makes_itself_is_not_the_persons_open_url(tmp_path, site, pages_dir):
    """A page that navigates itself (a script, a meta refresh) well after the person's last action used to add an
    ``open_url`` the person never made; the address bar (a navigation the browser starts) is still one."""
    button = '<button id="{0}" style="position:absolute;left:40px;top:40px;width:160px;height:40px">{0}</button>'
    (pages_dir / "a.html").write_text(button.format("go") + "<script>document.getElementById('go').onclick = "
                                      "() => setTimeout(() => { location.href = 'b.html'; }, 2600);</script>")
    (pages_dir / "b.html").write_text('<meta http-equiv="refresh" content="2.5;url=c.html"><p>b</p>')
    (pages_dir / "c.html").write_text("<p>c</p>")
    (pages_dir / "d.html").write_text(button.format("ok"))
    recorder = WebRecorder(PlaywrightDevice(WebConfig(viewport_width=W, viewport_height=H)), site.url("a.html"))
    writer = RunWriter(tmp_path / "runs", config={}).episode(task="t", actor=Actor.HUMAN)
    env = RecordingEnv(recorder, "go, then open d")

    async def main():
        task = asyncio.create_task(record_demonstration(env, writer))
        await asyncio.wait_for(recorder.started.wait(), 30)
        page = recorder.device.page
        await page.mouse.click(*_centre(await page.locator("#go").bounding_box()))
        await page.wait_for_url("**/c.html", timeout=20_000)  # the page went to b, and b refreshed to c
        await asyncio.sleep(0.3)
        await page.goto(site.url("d.html"))  # the person, in the address bar
        await asyncio.sleep(0.3)
        await page.mouse.click(*_centre(await page.locator("#ok").bounding_box()))
        await asyncio.sleep(0.6)
        await page.keyboard.press("Control+Alt+s")
        result = await asyncio.wait_for(task, 30)
        await env.close()
        return result

    result = asyncio.run(main())
    assert result.record.outcome is Outcome.CLAIMED
    episode = read_episode(writer.path)
    assert [s.action["kind"] for s in episode.steps] == ["click", "open_url", "click", "finish"]
    assert episode.steps[1].action["text"].endswith("/d.html")
    assert episode.record.env["recorder"]["page_loads"] == 2


# -- the interpreter, report by report ------------------------------------------------------------------------------
def _report(kind: str, **fields) -> RawReport:
    return RawReport(kind, 1.0, None, {"kind": kind, "t": 1000.0, "url": "http://127.0.0.1/", **fields})


TARGET = {"tag": "button", "role": "", "name": "OK", "selector": "#ok", "password": False, "box": [10, 10, 90, 40]}
MALFORMED = [
    ("down", {"x": math.nan, "y": 20, "button": 0}),
    ("down", {"x": 20, "y": math.inf, "button": 0}),
    ("up", {"x": "20", "y": 20, "button": 0}),
    ("click", {"x": 20, "y": 20, "button": 0, "count": 1, "target": {**TARGET, "box": "10,10,90,40"}}),
    ("click", {"x": 20, "y": 20, "button": 0, "count": 1, "target": {**TARGET, "box": [10, math.nan, 90, 40]}}),
    ("click", {"x": 20, "y": 20, "button": True, "count": "2"}),
    ("context", {"x": None, "y": 20}),
    ("wheel", {"x": 20, "y": 20, "dx": 0, "dy": math.nan, "mode": 0}),
    ("key", {"key": "NoSuchKey", "ctrl": True, "alt": False, "meta": False, "shift": False}),
    ("key", {"key": "Unidentified", "ctrl": False, "alt": False, "meta": False, "shift": False}),
    ("key", {"key": "", "ctrl": True, "alt": True, "meta": False, "shift": False}),
    ("key", {"key": ["s"], "ctrl": True, "alt": True, "meta": False, "shift": False}),
    ("key", {"key": "s", "ctrl": "yes", "alt": True, "meta": False, "shift": False}),
    ("char", {"key": "ab"}),
    ("typed", {"text": 42, "before": "", "reason": "blur", "target": TARGET}),
    ("typed", {"text": "x", "before": "", "reason": "blur", "target": "the field"}),
    ("select", {"label": ["Paris"], "value": "p", "target": TARGET}),
    ("loaded", {"url": {"href": "x"}, "how": "navigate"}),
    ("tab", {"tab": 3}),
    ("teleport", {"x": 1, "y": 1}),
    ("click", {"x": 20, "y": 20, "button": 0, "count": 1, "pw": [[0, 0, "big", 10]]}),
]


FROM_THE_LISTENER = [(k, f) for k, f in MALFORMED if k not in RECORDER_KINDS]
"""(The recorder refuses a listener report named like its own before the interpreter sees it.)"""


@pytest.mark.parametrize(("kind", "fields"), MALFORMED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(MALFORMED)])
def test_check_report_refuses_a_malformed_report(kind, fields):
    with pytest.raises(ValueError):
        check_report(kind, {"t": 1000.0, **fields})


def test_malformed_reports_are_counted_and_skipped_and_the_rules_carry_on():
    """Every malformed report fed between the parts of a click, a key and a typed field: each is refused and
    counted, none changes what the rules make of the well-formed ones, and the stop key still ends the recording."""
    interpreter = Interpreter(viewport=(800, 600))
    made = []

    def feed(report):
        made.extend(interpreter.feed(report))
        for kind, fields in FROM_THE_LISTENER:  # the well-formed report is followed by every malformed one
            made.extend(interpreter.feed(_report(kind, **fields)))

    feed(_report("down", x=20, y=20, button=0, target=TARGET))
    feed(_report("up", x=21, y=20, button=0, target=TARGET))
    feed(_report("click", x=21, y=20, button=0, count=1, target=TARGET))
    made.extend(interpreter.flush())
    feed(_report("key", key="F2", ctrl=False, alt=False, meta=False, shift=False))
    feed(_report("typed", text="hello", before="", reason="blur", target={**TARGET, "tag": "input"}))
    assert not interpreter.stopped
    made.extend(interpreter.feed(_report("key", key="s", ctrl=True, alt=True, meta=False, shift=False)))
    assert interpreter.stopped
    assert [m.action.kind for m in made] == [ActionKind.CLICK, ActionKind.KEY, ActionKind.TYPE]
    assert made[0].action.point.x == pytest.approx(20 / 800) and made[2].action.text == "hello"
    assert sum(interpreter.refused.values()) == 5 * len(FROM_THE_LISTENER)



def test_no_mutated_report_escapes_the_interpreter():
    """Reports of every kind with one field (or one field of the target) replaced by junk, 3,000 of them: feed never
    raises, whatever it makes of them, and the stop key still ends the recording at the end."""
    import random

    rng = random.Random(26)
    junk = [math.nan, math.inf, -math.inf, 1e308, -1, 2**80, "", "x" * 500, "Control", [], [1, 2], {}, None, True,
            {"box": "1"}, [[math.nan] * 4], "NaN", 0.5]
    valid = {
        "down": {"x": 20, "y": 20, "button": 0, "target": TARGET, "pw": [[0, 0, 10, 10]]},
        "up": {"x": 22, "y": 20, "button": 0, "target": TARGET},
        "click": {"x": 22, "y": 20, "button": 0, "count": 2, "target": TARGET},
        "context": {"x": 5, "y": 5, "target": TARGET},
        "wheel": {"x": 5, "y": 5, "dx": 0, "dy": 120, "mode": 1},
        "key": {"key": "Enter", "ctrl": False, "alt": False, "meta": False, "shift": True},
        "char": {"key": "z"},
        "typed": {"text": "hi", "before": "", "reason": "blur", "target": TARGET},
        "select": {"label": "Paris", "value": "p", "target": TARGET},
        "loaded": {"url": "http://127.0.0.1/x", "how": "back_forward"},
    }
    interpreter = Interpreter(viewport=(800, 600))
    for _ in range(3000):
        kind = rng.choice(sorted(valid))
        fields = {k: (dict(v) if isinstance(v, dict) else v) for k, v in valid[kind].items()}
        name = rng.choice(sorted(fields))
        if isinstance(fields[name], dict) and rng.random() < 0.5:
            fields[name][rng.choice(sorted(fields[name]))] = rng.choice(junk)
        else:
            fields[name] = rng.choice(junk)
        out = interpreter.feed(_report(kind, **fields))
        assert isinstance(out, list)
        interpreter.flush()
    assert sum(interpreter.refused.values()) > 1000  # most junk is refused by the checks
    assert not interpreter.stopped and interpreter.paused_since is None  # one junk field never makes a control key
    interpreter.feed(_report("key", key="s", ctrl=True, alt=True, meta=False, shift=False))
    assert interpreter.stopped
