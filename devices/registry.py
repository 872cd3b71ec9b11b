"""The device kinds handeye drives: one entry each, which every command, the online session and the fleet actor ask.

    kind = device_kind("android")                     # UnknownDeviceKind, naming the closest, for another name
    kind, address = parse_device("android:emulator-5554")
    device = kind.build(kind.configured(section, address), settle)   # not started yet
    kind.screens(section)                             # what `agent devices` lists: monitors, phones, a browser
    kind.requirements()                               # what `agent doctor` checks for it

An entry (``DeviceKindSpec``) says everything the rest of handeye needs to know about a kind: its ``[section]`` of
``config.toml`` and the config class read into it, how to build a device and a recorder, how ``agent devices``
lists what is connected, what ``agent doctor`` checks, which actions it supports, what the ``NAME:ADDRESS`` form of
``--device`` addresses, and its rules (a desktop is one screen per process; a URL opens only in a browser).

Each kind registers itself from a light module of its own package (``devices/<kind>/kind.py``: no driver library is
imported until a device is built or listed); ``KIND_MODULES`` names those modules. Adding a device kind is a package
with such a module and one line in ``KIND_MODULES``.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from devices.actions import ActionKind
from devices.errors import UnknownDeviceKind

__all__ = ["DEFAULT_KIND", "KIND_MODULES", "SCREENS", "DeviceKindSpec", "RecordOptions", "Requirement", "all_device_kinds", "command_version", "device_kind",
           "device_kinds", "parse_device", "register_kind"]

DEFAULT_KIND = "web"
"""The device a command drives when none is named (a headless browser: no phone, display or GPU needed)."""
KIND_MODULES = ("devices.web.kind", "devices.desktop.kind", "devices.android.kind")
"""Modules whose import registers a device kind, in the order commands list them."""


SCREENS = ("computer", "phone")
"""What a device kind's screens can be (``DeviceKindSpec.screen``)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One part a device kind needs, as ``agent doctor`` reports it."""

    what: str
    ok: bool | None
    """True found, False missing, None could not tell."""
    detail: str
    """The version or place when found; what to install when not."""
    required: bool = False
    """Whether ``agent doctor`` fails without it (the parts of the default device, the web's)."""


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """How ``agent record`` asks for a recording; each kind's recorder takes what applies to it."""

    url: str = ""
    """The start page, for kinds that open one (``opens_url``)."""
    headless: bool = False
    """No window, for a program playing the person (the web)."""
    settings: Any = None
    """The kind's recorder settings (a ``record_config`` instance, its ``[NAME_record]`` section); None: their
    defaults."""
    pause_key: str | None = None
    """The pause key combination (``--pause-key``), which wins over ``settings``' own; None: the settings'."""
    stop_key: str | None = None
    """The stop key combination (``--stop-key``), likewise."""


@dataclass(frozen=True, slots=True)
class DeviceKindSpec:
    """One device kind (see the module docstring)."""

    name: str
    """The kind's name: ``--device NAME``, ``device.kind``, its ``[NAME]`` config section, an environment's kind."""
    summary: str
    """One line: what it drives (the config section's comment and ``agent devices``' header)."""
    config: type
    """The frozen dataclass its ``[NAME]`` section is read into (every field defaulted)."""
    build: Callable[..., Any]
    """``build(section, settle, *, url="")`` -> the device, not started (``url``: the start page, ``opens_url``)."""
    actions: frozenset[ActionKind]
    """The action kinds its devices perform; any other is an ``UnsupportedAction``."""
    screens: Callable[[Any], list[str]]
    """``screens(section)`` -> one line per screen it could drive now (raises ``DeviceError`` when it cannot tell)."""
    requirements: Callable[[], list[Requirement]]
    """What it needs installed, checked now (``agent doctor``)."""
    recorder: Callable[..., Any] | None = None
    """``recorder(section, settle, options: RecordOptions)`` -> a recorder of a person's demonstration, or None."""
    record_config: type | None = None
    """The frozen dataclass its recorder's settings are read into (every field defaulted): the ``[NAME_record]``
    section of ``config.toml`` (``record_section``), handed to ``recorder`` as ``RecordOptions.settings``."""
    address: str = ""
    """What ``--device NAME:ADDRESS`` names (``"SERIAL"``); "" when the kind takes no address."""
    address_field: str = ""
    """The field of ``config`` an address sets (``"serial"``)."""
    address_noun: str = ""
    """How messages call one address ("phone serial")."""
    opens_url: bool = False
    """Its devices start on a URL (``--url``, ``device.url``); the others show their own screen."""
    one_per_process: bool = False
    """Two of its devices in one process would share one screen (an X display): one actor per process."""
    reads_elements: bool = True
    """It can say which element is under a point (the DOM, a UI hierarchy); False: the guard reads the screen with
    OCR to tell an irreversible target."""
    start_hint: str = ""
    """What a task on it could be, for the message that asks for one (``agent run "..." --device NAME``)."""
    screen: str = "computer"
    """What its screens are, which picks the prompt variant a model family uses on it (``ModelFormat.screen_variants``
    in ``policy.formats``): "computer" (a pointer and a keyboard: clicks, hotkeys, scrolling) or "phone" (touch:
    taps, long presses, swipes, back, home, opening apps)."""

    def __post_init__(self) -> None:
        if bool(self.address) != bool(self.address_field):
            raise ValueError(f"device kind {self.name!r}: address and address_field go together")
        if self.address_field and self.address_field not in getattr(self.config, "__dataclass_fields__", {}):
            raise ValueError(f"device kind {self.name!r}: {self.config.__name__} has no field {self.address_field!r}")
        if self.screen not in SCREENS:
            raise ValueError(f"device kind {self.name!r}: screen {self.screen!r} is not one of {', '.join(SCREENS)}")
        if self.record_config is not None and self.recorder is None:
            raise ValueError(f"device kind {self.name!r}: record_config without a recorder")

    @property
    def record_section(self) -> str:
        """The config section of its recorder's settings (``android_record``); "" when it has none. Flat, not
        ``[record.android]``, so that ``--set android_record.KEY=VALUE`` names it as every section is named."""
        return f"{self.name}_record" if self.record_config is not None else ""

    def selector(self, address: str = "") -> str:
        """How ``--device`` writes this kind with ``address`` (``android:SERIAL``, or the name alone)."""
        return f"{self.name}:{address}" if address else self.name

    def forms(self) -> tuple[str, ...]:
        """The ``--device`` forms it accepts (``android``, ``android:SERIAL``)."""
        return (self.name, f"{self.name}:{self.address}") if self.address else (self.name,)

    def configured(self, section: Any, address: str = "") -> Any:
        """``section`` with ``address`` in ``address_field`` (the section as it is when ``address`` is "")."""
        if not address:
            return section
        if not self.address_field:
            raise UnknownDeviceKind(f"the {self.name} device takes no address; use --device {self.name}")
        return replace(section, **{self.address_field: address})

    def address_of(self, section: Any) -> str:
        """The address ``section`` names ("" for a kind without addresses, or when it names none)."""
        return str(getattr(section, self.address_field, "")) if self.address_field else ""

    def check_actors(self, count: int, addresses: Sequence[str] = ()) -> str:
        """Why ``count`` actors of this kind cannot run in one process with ``addresses``; "" when they can."""
        if count > 1 and self.one_per_process:
            return (f"{count} {self.name} actors in one process would share one screen: run one here (--parallel 1), "
                    f"and more as agent actor processes on displays of their own (docs/fleet.md)")
        if count > 1 and self.address and len(addresses) < count:
            noun = self.address_noun or "address"
            return (f"{count} {self.name} actors need {count} {noun}{'es' if noun.endswith('s') else 's'} (one each: "
                    f"OnlineConfig.serials), got {len(addresses)}")
        return ""


REGISTRY: dict[str, DeviceKindSpec] = {}


def register_kind(spec: DeviceKindSpec) -> DeviceKindSpec:
    """Register a device kind (from its package's ``kind`` module); a name registered twice is a bug."""
    if spec.name in REGISTRY and REGISTRY[spec.name] is not spec:
        raise ValueError(f"device kind {spec.name!r} is registered twice")
    REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    for module in KIND_MODULES:
        importlib.import_module(module)


def all_device_kinds() -> list[DeviceKindSpec]:
    """Every registered kind, in ``KIND_MODULES``' order (then any registered since)."""
    _load()
    return list(REGISTRY.values())


def device_kinds() -> tuple[str, ...]:
    """The names of the registered kinds (the first is the default device)."""
    return tuple(spec.name for spec in all_device_kinds())


def device_kind(name: str) -> DeviceKindSpec:
    """The kind registered as ``name``; ``UnknownDeviceKind`` naming the closest and listing them otherwise."""
    _load()
    try:
        return REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), list(REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownDeviceKind(f"{name!r} is not a device kind{hint}; use one of {', '.join(REGISTRY)}") from None


def parse_device(text: str) -> tuple[DeviceKindSpec, str]:
    """``--device``'s ``NAME`` or ``NAME:ADDRESS`` as (kind, address); ``UnknownDeviceKind`` saying the forms."""
    name, colon, address = str(text).partition(":")
    _load()
    spec = REGISTRY.get(name)
    if spec is None or (colon and not spec.address) or (colon and not address.strip()):
        raise UnknownDeviceKind(f"{text!r} is not a device; use {_all_forms()}")
    return spec, address.strip()


def _all_forms() -> str:
    forms = [form for spec in REGISTRY.values() for form in spec.forms()]
    return ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else "".join(forms)


def command_version(command: Sequence[str]) -> str:
    """The first line ``command`` prints (a tool's ``--version``), or "" when it cannot be run or fails."""
    import subprocess

    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else ""
