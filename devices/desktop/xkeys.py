"""X keycodes to characters and canonical key names, for recording what a person types.

The X RECORD extension reports key presses as keycodes with the modifier state just before the
press; which keysym a keycode means is the keyboard mapping's business, and the mapping changes
while a recording runs: ``xdotool type`` (and other tools that type any Unicode character) binds
a spare keycode to the character's keysym, presses it, and unbinds it again, often before a
recorder could ask the server. So ``Keymap`` is a copy of the server's mapping that the recorder
keeps current by applying every recorded ChangeKeyboardMapping request, in the order the server
saw it (``parse_keymap_changes``): each key press is read with the mapping that was in force when
it happened.

Keysyms become characters by the X rules (keysymdef.h, appendix A of the X protocol): Latin-1
keysyms are their code point, ``0x01000000 + cp`` is any Unicode character, the legacy blocks of
other scripts map through their 8-bit code pages (``LEGACY_CODECS``), keypad keysyms are their
digits. Named keys get the canonical names of ``devices/keys.py``. Pure: no X connection here.
"""

from __future__ import annotations

import struct
import unicodedata
from dataclasses import dataclass, field

#: modifier names, as the recorder reports held modifiers; Control, Alt and Meta make a hotkey
SHIFT, CAPS_LOCK, CONTROL, ALT, META, ALT_GR, NUM_LOCK = "Shift", "CapsLock", "Control", "Alt", "Meta", "AltGr", "NumLock"
COMMAND_MODIFIERS = frozenset({CONTROL, ALT, META})
#: the order modifiers take in a recorded hotkey
HOTKEY_ORDER = (CONTROL, ALT, SHIFT, META)

#: keysyms of named keys -> canonical names (devices/keys.py); keypad variants read as their main keys
NAMED_KEYSYMS = {
    0xFF0D: "Enter", 0xFF8D: "Enter", 0xFE34: "Enter",  # Return, KP_Enter, ISO_Enter
    0xFF09: "Tab", 0xFE20: "Tab",  # Tab, ISO_Left_Tab (what Shift+Tab produces)
    0xFF1B: "Escape", 0xFF08: "Backspace", 0xFFFF: "Delete", 0xFF9F: "Delete",
    0xFF63: "Insert", 0xFF9E: "Insert", 0xFF50: "Home", 0xFF95: "Home", 0xFF57: "End", 0xFF9C: "End",
    0xFF55: "PageUp", 0xFF9A: "PageUp", 0xFF56: "PageDown", 0xFF9B: "PageDown",
    0xFF51: "ArrowLeft", 0xFF96: "ArrowLeft", 0xFF52: "ArrowUp", 0xFF97: "ArrowUp",
    0xFF53: "ArrowRight", 0xFF98: "ArrowRight", 0xFF54: "ArrowDown", 0xFF99: "ArrowDown",
    0x0020: "Space", 0xFF80: "Space",
    **{0xFFBE + i: f"F{i + 1}" for i in range(12)},
}
#: keysyms of modifier keys -> the modifier they are
MODIFIER_KEYSYMS = {
    0xFFE1: SHIFT, 0xFFE2: SHIFT, 0xFFE5: CAPS_LOCK, 0xFFE3: CONTROL, 0xFFE4: CONTROL,
    0xFFE9: ALT, 0xFFEA: ALT, 0xFFE7: ALT, 0xFFE8: ALT,  # Alt_L/R, Meta_L/R (the PC's Alt keys)
    0xFFEB: META, 0xFFEC: META, 0xFFED: META, 0xFFEE: META,  # Super_L/R, Hyper_L/R (the "Windows" keys)
    0xFE03: ALT_GR, 0xFF7E: ALT_GR,  # ISO_Level3_Shift, Mode_switch
    0xFF7F: NUM_LOCK,
}
#: keypad keysyms that are characters
KEYPAD_CHARS = {
    **{0xFFB0 + i: str(i) for i in range(10)},
    0xFFAA: "*", 0xFFAB: "+", 0xFFAC: ",", 0xFFAD: "-", 0xFFAE: ".", 0xFFAF: "/", 0xFFBD: "=",
}
#: legacy keysym blocks (high byte) whose low byte is the character in this 8-bit code page
LEGACY_CODECS = {
    0x01: "iso8859_2", 0x02: "iso8859_3", 0x03: "iso8859_4", 0x04: "shift_jis",  # Latin-2/3/4, half-width kana
    0x05: "iso8859_6", 0x06: "koi8_u", 0x07: "iso8859_7", 0x0C: "iso8859_8", 0x0D: "tis_620",  # Arabic .. Thai
}
#: the core modifier bits in an event's state: Shift, Lock, Control, then Mod1..Mod5 (named by the modifier map)
CORE_BITS = (SHIFT, CAPS_LOCK, CONTROL)
NO_SYMBOL = 0


def keysym_char(keysym: int) -> str | None:
    """The printable character a keysym types, or None (named keys, modifiers, dead keys, unknown)."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    if 0x01000100 <= keysym <= 0x0110FFFF:
        char = chr(keysym - 0x01000000)
        return None if unicodedata.category(char) in ("Cc", "Cs") else char
    if keysym in KEYPAD_CHARS:
        return KEYPAD_CHARS[keysym]
    codec = LEGACY_CODECS.get(keysym >> 8)
    if codec is not None and keysym & 0xFF >= 0xA0:
        try:
            char = bytes([keysym & 0xFF]).decode(codec)
        except UnicodeDecodeError:
            return None
        return char if unicodedata.category(char) not in ("Cc", "Cn") else None
    return None


def is_keypad(keysym: int) -> bool:
    return 0xFF80 <= keysym <= 0xFFBD


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What one key press means under the mapping and modifier state it happened with."""

    keycode: int
    keysym: int
    """The keysym the press produced (shift level, Caps Lock, AltGr and layout group applied)."""
    char: str | None
    """The character it types, if any (a named key such as Enter types none)."""
    name: str | None
    """The canonical name of a named key (devices/keys.py), else None."""
    base: str | None
    """The key as a hotkey names it: the unshifted character of the first layout ("t" in Control+Shift+t),
    or its canonical name."""
    modifier: str | None = None
    """The modifier this key is (Shift, Control, Alt, Meta, AltGr, CapsLock, NumLock), else None."""


@dataclass(slots=True)
class Keymap:
    """The server's keyboard mapping, kept current by the recorder (see the module docstring)."""

    codes: dict[int, tuple[int, ...]]
    """keycode -> keysyms: columns (group 1 level 1, group 1 level 2, group 2 level 1, group 2 level 2,
    group 1 level 3, group 1 level 4, ...), as the core protocol lays them out."""
    mod_bits: dict[int, str] = field(default_factory=dict)
    """modifier bit -> modifier name, for the bits of an event's state (Shift, CapsLock, Control, Mod1..Mod5)."""

    @classmethod
    def of(cls, codes: dict[int, tuple[int, ...]], modifier_map: list[list[int]]) -> Keymap:
        """A keymap from keysym columns per keycode and the modifier map (8 lists of keycodes)."""
        keymap = cls(dict(codes))
        bits: dict[int, str] = {i: name for i, name in enumerate(CORE_BITS)}
        for index in range(3, min(8, len(modifier_map))):
            names = {MODIFIER_KEYSYMS.get(keymap.sym(kc, 0)) for kc in modifier_map[index] if kc}
            # Alt before Meta: Mod1 holds both Alt_L and Meta_L on most layouts, and a PC's Meta_L is its Alt key
            for name in (ALT, META, ALT_GR, NUM_LOCK):
                if name in names:
                    bits[index] = name
                    break
        keymap.mod_bits = bits
        return keymap

    def sym(self, keycode: int, column: int) -> int:
        syms = self.codes.get(keycode, ())
        return syms[column] if column < len(syms) else NO_SYMBOL

    def change(self, first: int, per_keycode: int, keysyms: tuple[int, ...]) -> None:
        """Apply one ChangeKeyboardMapping: keycodes from ``first`` get ``per_keycode`` keysyms each."""
        if per_keycode <= 0:
            return
        for i in range(len(keysyms) // per_keycode):
            self.codes[first + i] = tuple(keysyms[i * per_keycode:(i + 1) * per_keycode])

    def held(self, state: int) -> frozenset[str]:
        """The modifiers held (or locked) in an event's state."""
        return frozenset(name for bit, name in self.mod_bits.items() if state & (1 << bit))

    def resolve(self, keycode: int, state: int) -> KeyInfo:
        """The key press of ``keycode`` with modifier ``state`` (the state before the press, as X reports it)."""
        held = self.held(state)
        group = 1 if (state >> 13) & 3 else 0  # the XKB group rides in bits 13-14; the core mapping has two
        if group and not self.sym(keycode, 2):
            group = 0
        columns = (group * 2, group * 2 + 1)
        if ALT_GR in held and self.sym(keycode, 4 + group * 2):
            columns = (4 + group * 2, 5 + group * 2)
        lower, upper = self.sym(keycode, columns[0]), self.sym(keycode, columns[1])
        shifted = SHIFT in held
        if NUM_LOCK in held and is_keypad(upper):
            shifted = not shifted
        keysym = upper if shifted and upper else lower
        char = keysym_char(keysym)
        if char is not None and shifted and not upper and len(char.upper()) == 1:
            char = char.upper()  # (K, NoSymbol) reads as (lower K, upper K)
        if char is not None and CAPS_LOCK in held and char.isalpha() and len(char.upper()) == 1:
            char = char.lower() if shifted else char.upper()
        first = self.sym(keycode, 0)
        base = keysym_char(first)
        if base == " " or base is None:
            base = NAMED_KEYSYMS.get(first)
        return KeyInfo(keycode, keysym, char, NAMED_KEYSYMS.get(keysym) if char is None or keysym == 0x20 else None,
                       base, MODIFIER_KEYSYMS.get(keysym) or MODIFIER_KEYSYMS.get(first))


def parse_keymap_changes(data: bytes, swapped: bool) -> list[tuple[int, int, tuple[int, ...]]]:
    """The ChangeKeyboardMapping requests (core opcode 100) in recorded request data, as
    (first keycode, keysyms per keycode, keysyms). Requests arrive in their client's byte order:
    ``swapped`` (RECORD's client-swapped flag) means the opposite of ours."""
    order = ("<" if struct.pack("=H", 1) == b"\x00\x01" else ">") if swapped else "="
    out = []
    pos = 0
    while pos + 8 <= len(data):
        opcode, count, length = struct.unpack_from(order + "BBH", data, pos)
        if length == 0:  # a BIG-REQUESTS length: never a keyboard mapping, and nothing after it is ours
            break
        if opcode == 100 and length >= 2:
            first, per = struct.unpack_from(order + "BB", data, pos + 4)
            n = min(count * per, (length * 4 - 8) // 4)
            syms = struct.unpack_from(f"{order}{n}I", data, pos + 8)
            out.append((first, per, tuple(syms)))
        pos += length * 4
    return out
