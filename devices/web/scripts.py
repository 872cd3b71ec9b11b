"""The scripts the web device runs in the page: each a side-effect-free question, except where it says it marks
an element. Kept apart from the device so that reading the device is reading Python."""

# One round trip gathers everything an observation needs besides the pixels.
VIEW_JS = """() => {
  const v = window.visualViewport;
  const pw = [];
  for (const el of document.querySelectorAll('input[type=password], [data-handeye-masked]')) {
    const b = el.getBoundingClientRect();
    if (b.width > 0 && b.height > 0) pw.push([b.left, b.top, b.right, b.bottom]);
  }
  return {ox: v.offsetLeft, oy: v.offsetTop, w: v.width, h: v.height, scale: v.scale,
          px: v.pageLeft, py: v.pageTop, dpr: window.devicePixelRatio, sx: window.scrollX,
          sy: window.scrollY, url: location.href, title: document.title, pw: pw};
}"""

# What a press on an element activates, as the guard reads it: the control the element lies in (a button's label
# split across spans, an icon inside a button named by its aria-label or title), with every name it has; a "control"
# holding a long text is a container (a card inside a link), so the element speaks for itself. Invisible format
# characters go before the cut (bidi controls stay: they reorder what is drawn). Shared by ELEMENT_JS and FOCUSED_JS.
_LABEL_OF = r"""
  const CONTROLS = 'button, a, summary, label, input, select, [role=button], [role=link], [role=menuitem], ' +
    '[role=menuitemcheckbox], [role=menuitemradio], [role=tab], [role=option], [role=switch], [role=checkbox]';
  const labelOf = (el) => {
    const up = el.closest(CONTROLS);
    const c = up && (up.innerText || '').length <= 120 ? up : el;
    const named = ['button', 'submit', 'reset'].includes((c.type || '').toLowerCase()) ? c.value : '';
    return [c.innerText, c.getAttribute('aria-label'), c.getAttribute('title'), c.getAttribute('alt'),
            c.getAttribute('placeholder'), named]
      .filter(Boolean).join(' ').replace(/(?![\u202a-\u202e\u2066-\u2069])\p{Cf}/gu, '')
      .trim().slice(0, 200);
  };
"""

ELEMENT_JS = """([x, y]) => {""" + _LABEL_OF + """
  const el = document.elementFromPoint(x, y);
  if (!el) return null;
  const b = el.getBoundingClientRect();
  return {tag: el.tagName.toLowerCase(), id: el.id || null, role: el.getAttribute('role'),
          // never a password field's value: target text is stored in trajectories
          // invisible format characters (zero-width, soft hyphen; not the bidi controls, which reorder what is
          // drawn) go before the cut, so that padding made of them cannot push the label out of the 80 kept
          text: (el.innerText || el.getAttribute('aria-label') || el.getAttribute('placeholder') ||
                 ((el.type || '').toLowerCase() === 'password' ? '' : (el.value || '')))
                .replace(/(?![\\u202a-\\u202e\\u2066-\\u2069])\\p{Cf}/gu, '').trim().slice(0, 80),
          label: labelOf(el),
          box: [b.left, b.top, b.right, b.bottom]};
}"""

TWO_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"

FOCUS_IS_PASSWORD_JS = """() => {
  let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  return !!a && a.tagName === 'INPUT' && (a.type || '').toLowerCase() === 'password';
}"""

# Typing a secret into a plain field: the field is marked, and every later observation masks it like a password.
MASK_FOCUSED_JS = """() => {
  let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  if (a && a !== document.body) a.setAttribute('data-handeye-masked', '1');
  return !!a;
}"""

FOCUSED_JS = """() => {""" + _LABEL_OF + """
  let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  if (!a || a === document.body || a === document.documentElement) return null;
  const b = a.getBoundingClientRect();
  const pw = a.tagName === 'INPUT' && (a.type || '').toLowerCase() === 'password';
  return {tag: a.tagName.toLowerCase(), password: pw,
          text: (a.getAttribute('aria-label') || a.getAttribute('placeholder') || a.innerText || '')
                .replace(/(?![\\u202a-\\u202e\\u2066-\\u2069])\\p{Cf}/gu, '').trim().slice(0, 80),
          label: labelOf(a),
          box: [b.left, b.top, b.right, b.bottom]};
}"""
