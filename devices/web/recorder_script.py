"""The listener the web recorder runs in every page and frame (``devices/web/recorder.py``).

It runs in the recorder's isolated world of each frame (``devices/web/listen.py``), where no page
script can reach it, and reports raw input through the binding that exists in that world only
(``__handeyeReport``, one JSON text per report): pointer downs and ups, clicks (with their click
count), context menus, wheel turns, key downs that are not typing (keys outside text fields, any
key with Control / Alt / Meta, and Enter, Tab, Escape and the arrows everywhere), typing committed
per field (on blur, Enter, Tab, or a click elsewhere), and select changes. Each report has its
time (``Date.now()``), the point in the frame's CSS pixels, the element's description (tag, role,
accessible name, a CSS selector, its box, whether it is a password field) and the boxes of the
frame's password fields, so the frame the recorder keeps can be masked. Composed events are
followed into shadow roots (``composedPath()[0]``). Nothing in the page is changed and no event is
stopped.

Only the person's input counts: every handler drops an event whose ``isTrusted`` is false (one a
page script made with ``dispatchEvent``, ``click()`` and the like), and a field's text is reported
only when the person typed into it (a trusted ``beforeinput`` or ``input``), as the person's last
keystroke left it: a page script that fills or changes a field without an input event does not
make typing. The handlers are on ``window`` in the capture phase, added before any page script
runs, so they see each event before the page's own handlers can stop it.
"""

LISTENER_JS = r"""
(() => {
  if (window.__handeyeRecorder) return;
  window.__handeyeRecorder = true;
  // This world's own global: no page script sees it, so the binding found here is the recorder's.
  const send = (ev) => { try { window.__handeyeReport(JSON.stringify(ev)); } catch (e) {} };
  const on = (type, handler, options) => window.addEventListener(type, (e) => { if (e.isTrusted) handler(e); },
                                                                  options || true);
  const real = (e) => (e.composedPath && e.composedPath()[0]) || e.target;
  const isPassword = (el) => !!el && el.tagName === 'INPUT' && (el.type || '').toLowerCase() === 'password';
  const isField = (el) => !!el && (el.isContentEditable ||
      (el.tagName === 'INPUT' && !['button', 'submit', 'reset', 'checkbox', 'radio', 'file', 'image', 'range',
                                   'color'].includes((el.type || 'text').toLowerCase())) ||
      el.tagName === 'TEXTAREA');
  const value = (el) => el.isContentEditable ? el.innerText : (el.value || '');
  const name = (el) => {
    if (!el || !el.getAttribute) return '';
    const aria = el.getAttribute('aria-label');
    if (aria) return aria;
    const by = el.getAttribute('aria-labelledby');
    if (by) { const l = el.ownerDocument.getElementById(by); if (l) return l.innerText; }
    if (el.labels && el.labels.length) return el.labels[0].innerText;
    if (el.tagName === 'SELECT') return (el.selectedOptions[0] || {}).label || '';
    const text = (el.innerText || '').trim();
    if (text) return text;
    if (!isPassword(el) && el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(el.type)) return el.value;
    return el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('alt') || '';
  };
  // A CSS selector per tree scope, scopes joined by ' >>> ' (into a shadow root): ids are unique only in their scope.
  const selector = (el) => {
    const scopes = [];
    let node = el;
    while (node) {
      const parts = [];
      while (node && node.nodeType === 1) {
        if (node.id) { parts.unshift('#' + CSS.escape(node.id)); break; }
        let part = node.tagName.toLowerCase();
        const parent = node.parentNode;
        if (parent && parent.children) {
          const same = [...parent.children].filter(c => c.tagName === node.tagName);
          if (same.length > 1) part += ':nth-of-type(' + (same.indexOf(node) + 1) + ')';
        }
        parts.unshift(part);
        node = parent;
      }
      scopes.unshift(parts.join(' > '));
      const root = el.getRootNode ? (node && node.nodeType === 1 ? node.getRootNode() : node) : null;
      node = root && root.nodeType === 11 ? root.host : null;  // a shadow root: go on from its host
      el = node;
    }
    return scopes.join(' >>> ');
  };
  const describe = (el) => {
    if (!el || !el.getBoundingClientRect) return null;
    const b = el.getBoundingClientRect();
    const whole = el === document.documentElement || el === document.body;  // the page itself: no name worth keeping
    return {tag: el.tagName.toLowerCase(), role: el.getAttribute('role') || '',
            name: whole ? '' : name(el).trim().slice(0, 120),
            selector: selector(el), password: isPassword(el), box: [b.left, b.top, b.right, b.bottom]};
  };
  const passwordBoxes = () => {
    const out = [];
    for (const el of document.querySelectorAll('input[type=password]')) {
      const b = el.getBoundingClientRect();
      if (b.width > 0 && b.height > 0) out.push([b.left, b.top, b.right, b.bottom]);
    }
    return out;
  };
  const report = (kind, e, el, extra) => send(Object.assign({
    kind, t: Date.now(), x: e && e.clientX, y: e && e.clientY, target: describe(el), pw: passwordBoxes(),
    vw: window.innerWidth, vh: window.innerHeight, url: location.href}, extra || {}));

  // Typing: one report per field, with its value when the person leaves it.
  let editing = null;  // {el, before, t, after}: t and after once the person typed (trusted input events only)
  const commit = (reason) => {
    if (!editing) return;
    const el = editing.el, before = editing.before, t0 = editing.t, after = editing.after;
    editing = null;
    if (t0 === null || after === null || after === before) return;  // nobody typed here, or it is as it was
    send({kind: 'typed', t: t0, text: after, before, reason, target: describe(el), pw: passwordBoxes(),
          vw: window.innerWidth, vh: window.innerHeight, url: location.href});
  };
  const editingIn = (el) => {
    if (!editing || editing.el !== el) { commit('focus'); editing = {el, before: value(el), t: null, after: null}; }
  };
  on('focusin', (e) => {
    const el = real(e);
    if (editing && editing.el !== el) commit('focus');
    if (isField(el)) editingIn(el);
  });
  on('beforeinput', (e) => {
    const el = real(e);
    if (!isField(el)) return;
    editingIn(el);
    if (editing.t === null) editing.t = Date.now();
  });
  on('input', (e) => {
    const el = real(e);
    if (!isField(el)) return;
    editingIn(el);
    if (editing.t === null) editing.t = Date.now();
    editing.after = value(el);  // the field as the person's keystroke left it
  });
  on('focusout', (e) => { if (editing && editing.el === real(e)) commit('blur'); });
  on('pagehide', () => commit('leave'));

  on('pointerdown', (e) => {
    const el = real(e);
    if (editing && editing.el !== el) commit('click');
    report('down', e, el, {button: e.button});
  });
  on('pointerup', (e) => report('up', e, real(e), {button: e.button}));
  on('click', (e) => report('click', e, real(e), {count: e.detail, button: e.button}));
  on('contextmenu', (e) => report('context', e, real(e)));
  on('wheel', (e) => report('wheel', e, real(e), {dx: e.deltaX, dy: e.deltaY, mode: e.deltaMode}),
     {capture: true, passive: true});
  const ALWAYS = ['Enter', 'Tab', 'Escape', 'ArrowUp', 'ArrowDown', 'ArrowLeft', 'ArrowRight', 'PageUp', 'PageDown',
                  'Home', 'End', 'Delete', 'F1', 'F2', 'F3', 'F4', 'F5', 'F6', 'F7', 'F8', 'F9', 'F10', 'F11', 'F12'];
  on('keydown', (e) => {
    if (e.repeat || ['Control', 'Shift', 'Alt', 'Meta'].includes(e.key)) return;
    const el = real(e);
    const mods = e.ctrlKey || e.altKey || e.metaKey;
    const typing = (isField(el) || (el && el.tagName === 'SELECT')) && !mods && !ALWAYS.includes(e.key);
    if (typing) return;  // a field's text is reported when the person leaves it; a select's choice when it changes
    if ((e.key === 'Enter' || e.key === 'Tab') && editing && editing.el === el) commit(e.key.toLowerCase());
    if (!isField(el) && !mods && e.key.length === 1 && e.key !== ' ') {
      report('char', null, el, {key: e.key});  // a printable key outside a text field
      return;
    }
    report('key', null, el, {key: e.key, ctrl: e.ctrlKey, alt: e.altKey, meta: e.metaKey, shift: e.shiftKey});
  });
  on('change', (e) => {
    const el = real(e);
    if (el && el.tagName === 'SELECT') {
      const o = el.selectedOptions[0];
      report('select', null, el, {label: o ? o.label : '', value: el.value});
    }
  });
  const nav = (performance.getEntriesByType && performance.getEntriesByType('navigation')[0]) || {};
  // A document that was there before the listener (a tab the recorder just took in) is not a load the person made.
  if (window === window.top && !window.__handeyeLate) send({kind: 'loaded', t: Date.now(), url: location.href, how: nav.type || 'navigate'});
})();
"""

LATE_LISTENER_JS = "window.__handeyeLate = true;\n" + LISTENER_JS
"""The listener for a document already loaded when it arrives: it reports no load."""

STATE_JS = r"""
(selectors) => {
  const find = (sel) => {
    let root = document, el = null;
    for (const part of sel.split(' >>> ')) {
      el = root.querySelector(part);
      if (!el) return null;
      root = el.shadowRoot || el;
    }
    return el;
  };
  const out = {};
  for (const sel of selectors) {
    const el = find(sel);
    if (!el) { out[sel] = null; continue; }
    const pw = el.tagName === 'INPUT' && (el.type || '').toLowerCase() === 'password';
    out[sel] = {tag: el.tagName.toLowerCase(), value: pw ? null : (el.isContentEditable ? el.innerText : (el.value ?? null)),
                checked: ('checked' in el) ? el.checked : null,
                selected: el.tagName === 'SELECT' ? [...el.selectedOptions].map(o => o.label) : null,
                text: (el.innerText || '').trim().slice(0, 200)};
  }
  return {url: location.href, title: document.title, text: (document.body ? document.body.innerText : '').slice(0, 20000),
          elements: out};
}
"""
"""Reads, in one frame, the state of the elements named by ``selectors`` (``>>>`` crosses into a shadow root) and
the page's URL, title and visible text: what a derived checker compares."""
