"""Configuration: ``config.toml`` read into nested frozen dataclasses, with ``--set`` overrides.

Every section is a dataclass whose fields all have defaults; a field's docstring (the string under
it) is its documentation, and ``config.toml`` at the repository root lists every option with it.
Unknown sections or keys are errors that name the closest valid one; values are type-checked.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agent.errors import ConfigError
from devices.registry import DEFAULT_KIND, all_device_kinds, device_kind
from devices.settle import SettleConfig
from policy.model_config import ModelSettings
from policy.ocr import OcrConfig

log = logging.getLogger(__name__)

POLICY_KINDS = ("ocr", "scripted", "transformers", "openai")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    max_steps: int = 15
    """Step budget of an episode: steps that chose an action (executed, refused or dry-run)."""
    max_parse_retries: int = 3
    """Consecutive unparseable decisions tolerated before the episode is aborted."""
    dry_run: bool = False
    """Record what would be done without doing it."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}")
        if self.max_parse_retries < 0:
            raise ValueError(f"max_parse_retries must be 0 or more, got {self.max_parse_retries}")


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    kind: str = DEFAULT_KIND
    """Which device to drive: web (a Chromium page), desktop (the X11 screen) or android (a phone over adb)."""
    url: str = ""
    """Start page of the web device; empty = the built-in demo page with its own task checker."""

    def __post_init__(self) -> None:
        device_kind(self.kind)  # UnknownDeviceKind (a ValueError) naming the closest kind


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    kind: str = "ocr"
    """Who decides: ocr (offline text grounding), scripted (a JSON list of actions), transformers or openai (a model, see [model])."""
    script: str = ""
    """For the scripted policy: path of a JSON file holding a list of actions."""

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(POLICY_KINDS)}")


@dataclass(frozen=True, slots=True)
class ModelConfig(ModelSettings):
    """``[model]`` of config.toml: the shared model settings (``policy.model_config``) and how the policy reaches and
    samples the model."""

    url: str = ""
    """For policy openai: the server's base URL, e.g. http://127.0.0.1:8000 (vLLM, SGLang, transformers serve)."""
    api_key_env: str = ""
    """For policy openai: the environment variable holding the API key, if the server needs one."""
    timeout_s: float = 60.0
    """For policy openai: seconds to wait for one answer before retrying."""
    check_image_tokens: bool = True
    """For policy openai: check that the server counted each image at w' x h' / 784 tokens (the client's resize was the server's); false for a family whose server counts images otherwise."""
    samples: int = 1
    """Answers sampled per observation (the first that parses is executed; all are kept as candidates)."""

    def __post_init__(self) -> None:
        ModelSettings.__post_init__(self)
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")


@dataclass(frozen=True, slots=True)
class GuardConfig:
    refuse: tuple[str, ...] = ()
    """Action kinds never executed (e.g. ["open_url"]); the policy is told they were refused."""
    confirm: tuple[str, ...] = ()
    """Action kinds that need a yes on the terminal first; refused when there is no terminal."""
    forbidden_regions: tuple[tuple[float, ...], ...] = ()
    """Screen regions never touched: [[x1, y1, x2, y2], ...] in normalized frame coordinates (typing and keys too,
    while the focused element lies in one)."""
    allow_schemes: tuple[str, ...] = ("http", "https")
    """URL schemes open_url may open; file://, chrome:// and other local schemes are refused unless listed."""
    allow_domains: tuple[str, ...] = ()
    """Web: the only domains open_url may open and actions may happen on (subdomains included); empty = every
    domain."""
    allow_packages: tuple[str, ...] = ()
    """Android: the only apps open_app may open and actions may happen in; empty = every app."""
    allow_link_local: bool = False
    """Let open_url reach link-local addresses (169.254.0.0/16, fe80::/10) and cloud metadata services
    (169.254.169.254, fd00:ec2::254, metadata.google.internal, ...), and actions happen on such pages; refused
    unless true (a model that reads the metadata service reads the machine's credentials)."""
    irreversible: bool = True
    """Ask before an action that activates a target reading as irreversible (pay, buy, delete, send, post, uninstall,
    reset, transfer, ... and Chinese equivalents, Traditional and Simplified, look-alike letters folded): a click, tap,
    typing with a point, Enter, Space or a newline on the focused element; refused when nobody can answer."""
    irreversible_words: tuple[str, ...] = ()
    """More words that mark a target as irreversible, added to the built-in list."""
    closing_hotkeys: bool = True
    """Ask before hotkeys that close a window, tab, application or the session, judged by what the keys do (Alt+F4,
    Ctrl+F4, Ctrl+W, Ctrl+Shift+Q, Cmd+Q, Ctrl+Alt+Delete, ...)."""
    assume_yes: bool = False
    """Say yes to every confirmation without asking (agent run --yes)."""

    def __post_init__(self) -> None:
        from agent.guard import RegionGuard
        from devices.actions import ActionKind

        RegionGuard(self.forbidden_regions)  # raises with the rule when a region is malformed
        valid = {k.value for k in ActionKind}
        for name in (*self.refuse, *self.confirm):
            if name not in valid:
                close = difflib.get_close_matches(name, sorted(valid), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"{name!r} is not an action kind{hint}")
            if name in ("finish", "infeasible"):
                raise ValueError(f"{name} cannot be refused or confirmed: it ends the episode and touches nothing, so "
                                 "the guard always allows it (remove it from guard.refuse / guard.confirm)")
        for scheme in self.allow_schemes:
            if not scheme or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
                raise ValueError(f"allow_schemes: {scheme!r} is not a URL scheme (write it without '://', e.g. https)")
        from agent.reading import read_as_seen

        for word in self.irreversible_words:
            if not all(read_as_seen(word)):
                raise ValueError(f"irreversible_words: {word!r} reads as nothing once invisible characters and marks "
                                 "are dropped; write the word as the screen shows it")
        for domain in self.allow_domains:
            if "/" in domain or ":" in domain or not domain.strip("."):
                raise ValueError(f"allow_domains: {domain!r} is not a domain (write example.com, not a URL)")


DEMOS_FOLDER = "demos"
"""The folder inside ``record.runs_dir`` that demonstrations go to unless ``record.demos_dir`` says otherwise."""


@dataclass(frozen=True, slots=True)
class RecordConfig:
    runs_dir: str = "runs"
    """Folder that receives one sub-folder per run."""
    demos_dir: str | None = None
    """Folder that receives agent record's demonstrations, one sub-folder per recording (agent record --runs-dir);
    unset = demos inside runs_dir (runs/demos), the folder training on demonstrations reads."""
    frame_format: str = "png"
    """Stored frame encoding: png (lossless, the exact frame the policy saw) or jpeg (smaller)."""
    fsync: bool = True
    """fsync every frame, step line and folder to disk before the next step (survives power loss; about 1 ms per
    step, docs/benchmarks.md). false: steps are only flushed (a crash of the process still loses at most the step in
    flight)."""

    def __post_init__(self) -> None:
        if self.frame_format not in ("png", "jpeg"):
            raise ValueError(f"frame_format {self.frame_format!r} must be png or jpeg")
        if self.demos_dir is not None and not self.demos_dir.strip():
            raise ValueError(f"demos_dir must name a folder (or be {UNSET!r}: {DEMOS_FOLDER} inside runs_dir)")

    def demos_folder(self) -> Path:
        """Where ``agent record`` writes: ``demos_dir``, else ``runs_dir/demos``."""
        return Path(self.demos_dir) if self.demos_dir is not None else Path(self.runs_dir) / DEMOS_FOLDER


def default_device_sections() -> Mapping[str, Any]:
    """Every registered device kind's section at its defaults, by kind (``devices.registry``)."""
    return MappingProxyType({kind.name: kind.config() for kind in all_device_kinds()})


def default_record_sections() -> Mapping[str, Any]:
    """The recorder settings of every registered kind that has them, at their defaults, by kind (``[web_record]``,
    ``[desktop_record]``, ``[android_record]``: ``DeviceKindSpec.record_config``)."""
    return MappingProxyType({kind.name: kind.record_config() for kind in all_device_kinds()
                             if kind.record_config is not None})


@dataclass(frozen=True, slots=True)
class Config:
    agent: AgentConfig = field(default_factory=AgentConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    devices: Mapping[str, Any] = field(default_factory=default_device_sections)
    """Each device kind's own section (``[web]``, ``[desktop]``, ``[android]``: ``devices.registry``), by kind."""
    settle: SettleConfig = field(default_factory=SettleConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ocr: OcrConfig = field(default_factory=OcrConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    recorders: Mapping[str, Any] = field(default_factory=default_record_sections)
    """Each device kind's recorder settings (``[web_record]``, ``[desktop_record]``, ``[android_record]``), by kind."""
    secrets: tuple[tuple[str, str], ...] = ()
    """Credentials: NAME = "env:VARIABLE"; actions refer to them as {{secret:NAME}}."""

    def __post_init__(self) -> None:
        for name, defaults in (("devices", default_device_sections), ("recorders", default_record_sections)):
            given = getattr(self, name)
            if any(k not in given for k in defaults()) or not isinstance(given, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType({**defaults(), **given}))

    def section(self, kind: str | None = None) -> Any:
        """The config section of device kind ``kind`` (default: the configured ``device.kind``)."""
        return self.devices[kind or self.device.kind]

    def record_settings(self, kind: str | None = None) -> Any:
        """The recorder settings of device kind ``kind`` (default: ``device.kind``), None for a kind without them."""
        return self.recorders.get(kind or self.device.kind)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain data (secrets as their env: references, never values); a device kind's
        section is a top-level section, as in config.toml."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "devices":
                out.update({kind: dataclasses.asdict(section) for kind, section in value.items()})
            elif f.name == "recorders":
                out.update({device_kind(kind).record_section: dataclasses.asdict(settings)
                            for kind, settings in value.items()})
            else:
                out[f.name] = dict(value) if f.name == "secrets" else dataclasses.asdict(value)
        return out


def config_sections() -> dict[str, type]:
    """Every section of config.toml and the dataclass it is read into, in the file's order: each device kind's own
    section follows ``[device]``, each kind's recorder settings (``[NAME_record]``) follow ``[record]``."""
    out: dict[str, type] = {}
    for f in dataclasses.fields(Config):
        if f.name == "devices":
            out.update({kind.name: kind.config for kind in all_device_kinds()})
        elif f.name == "recorders":
            out.update({kind.record_section: kind.record_config for kind in all_device_kinds()
                        if kind.record_config is not None})
        elif f.name != "secrets":
            out[f.name] = f.default_factory  # type: ignore[assignment]
    return out


SECTIONS: dict[str, type] = config_sections()
"""``config_sections()`` when this module was imported (the kinds registered then)."""


def _closest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}? " if close else ""


UNSET = "none"
"""What a config file or ``--set`` writes for "unset" (None: the documented default, or off) where a field allows
it; TOML has no null."""


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        if isinstance(value, str) and value.strip().lower() == UNSET:
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        try:
            return _coerce(value, inner, where)
        except ConfigError as e:
            raise ConfigError(f"{e} (or {UNSET}, to leave it unset)") from None
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple and typing.get_args(hint)[0] is not str:
        # a list of lists: numbers (guard.forbidden_regions) or string pairs (android.app_aliases)
        inner = typing.get_args(typing.get_args(hint)[0])
        strings = bool(inner) and inner[0] is str
        ok = isinstance(value, (list, tuple)) and all(
            isinstance(row, (list, tuple)) and all(
                isinstance(v, str) if strings else (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in row)
            for row in value
        )
        if ok:
            return tuple(tuple(v if strings else float(v) for v in row) for row in value)
        example = '[["settings", "com.android.settings"]]' if strings else "[[0.9, 0.0, 1.0, 0.05]]"
        raise ConfigError(f"{where} must be a list of lists like {example}, got {value!r}")
    elif origin is tuple:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif origin in (typing.Union, types.UnionType):
        # the first member the value fits (desktop_record.pause_keys: a list of key names or "ctrl+alt+p")
        for member in typing.get_args(hint):
            try:
                return _coerce(value, member, where)
            except ConfigError:
                continue
        expected = " or ".join(_expected(member) for member in typing.get_args(hint))
        raise ConfigError(f"{where} must be {expected}, got {value!r} ({type(value).__name__})")
    raise ConfigError(f"{where} must be {_expected(hint)}, got {value!r} ({type(value).__name__})")


def _expected(hint: Any) -> str:
    """How a message names an option's type."""
    if typing.get_origin(hint) is tuple:
        return "a list of strings"
    return getattr(hint, "__name__", None) or str(hint)


def _build_section(name: str, cls: type, values: Any) -> Any:
    """``[name]``'s table read into ``cls``. A key an older file used (``cls.RENAMED``) is read as its new name, and a
    value that used to mean "unset" (a field's ``was`` metadata: ``lr = 0``, ``kl_coef = -1``) as unset; each with a
    warning that says what to write instead."""
    if not isinstance(values, dict):
        raise ConfigError(f"[{name}] must be a table of options, got {values!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = list(fields)
    renamed: dict[str, str] = getattr(cls, "RENAMED", {})
    kwargs = {}
    for key, value in values.items():
        if key in renamed and renamed[key] in fields:
            if renamed[key] in values:  # the new name set too (a file's old key, a flag's new one): the new wins
                log.warning("%s.%s is the old name of %s.%s, which is set too: %s.%s is ignored", name, key, name,
                            renamed[key], name, key)
                continue
            log.warning("%s.%s is now %s.%s: this file still reads, but write %s.%s", name, key, name, renamed[key],
                        name, renamed[key])
            key = renamed[key]
        if key not in names:
            raise ConfigError(f"unknown option {name}.{key}: {_closest(key, names)}valid options of [{name}]: {', '.join(names)}")
        was = fields[key].metadata.get("was")
        if was is not None and value == was and not isinstance(value, bool):
            log.warning("%s.%s = %r used to mean unset; it now reads as unset: leave the key out (or write %s = "
                        "\"%s\")", name, key, value, key, UNSET)
            kwargs[key] = None
            continue
        kwargs[key] = _coerce(value, hints[key], f"{name}.{key}")
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ConfigError(f"[{name}] {e}") from None


def _secrets(values: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(values, dict):
        raise ConfigError(f"[secrets] must be a table of NAME = \"env:VARIABLE\", got {values!r}")
    out = []
    for key, ref in values.items():
        if not isinstance(ref, str) or not ref.startswith("env:") or len(ref) <= 4:
            raise ConfigError(
                f"secrets.{key} must name an environment variable, like {key} = \"env:HANDEYE_{key.upper()}\"; "
                "credentials are never written in config files"
            )
        out.append((key, ref))
    return tuple(out)


def parse_override(text: str) -> tuple[str, str, Any]:
    """``section.key=value`` -> (section, key, value); the value is read as TOML, else kept as a string."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"--set {text!r} must look like section.key=value, e.g. --set agent.max_steps=5")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # bare words and URLs need no quotes on the command line
    return section, key.strip(), value


def _read_toml(path: str | Path | None, overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A config file's tables (empty when ``path`` is None) with the ``--set`` overrides applied."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist; pass --config with an existing file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} cannot be read: {e}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
    for text in overrides:
        section, key, value = parse_override(text)
        data.setdefault(section, {})
        if not isinstance(data[section], dict):
            raise ConfigError(f"--set {text!r}: {section} is not a section")
        data[section][key] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a config file (or the defaults when ``path`` is None) and apply ``--set`` overrides."""
    data = _read_toml(path, overrides)
    sections = config_sections()
    kinds = {kind.name for kind in all_device_kinds()}
    recorded = {kind.record_section: kind.name for kind in all_device_kinds() if kind.record_config is not None}
    valid = [*sections, "secrets"]
    kwargs: dict[str, Any] = {}
    devices: dict[str, Any] = {}
    recorders: dict[str, Any] = {}
    for name, values in data.items():
        if name == "secrets":
            kwargs[name] = _secrets(values)
        elif name in kinds:
            devices[name] = _build_section(name, sections[name], values)
        elif name in recorded:
            recorders[recorded[name]] = _build_section(name, sections[name], values)
        elif name in sections:
            kwargs[name] = _build_section(name, sections[name], values)
        else:
            raise ConfigError(f"unknown config section [{name}]: {_closest(name, valid)}sections are {', '.join(valid)}")
    return _with_trained_settings(Config(devices=devices, recorders=recorders, **kwargs))


def _with_trained_settings(cfg: Config) -> Config:
    """``cfg`` with what a trained run recorded beside its weights filled in, when the model is loaded here and
    ``model.id`` or ``model.adapter`` names such a run (``policy.trained``: base model, family, prompt variant,
    pixel budget; a setting given explicitly wins)."""
    if cfg.policy.kind != "transformers":
        return cfg
    from policy.trained import restore_trained

    try:
        model = restore_trained(cfg.model)
    except ValueError as e:  # TrainedSettingsError, or a restored pixel budget that contradicts the one given
        raise ConfigError(str(e)) from None
    return cfg if model is cfg.model else dataclasses.replace(cfg, model=model)


def load_train_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """``agent train``'s config: a TOML file read into ``train.config.TrainConfig``, with ``--set`` overrides."""
    from train.config import TRAIN_SECTIONS, TrainConfig

    data = _read_toml(path, overrides)
    kwargs: dict[str, Any] = {}
    for name, values in data.items():
        if name not in TRAIN_SECTIONS:
            raise ConfigError(f"unknown training config section [{name}]: {_closest(name, list(TRAIN_SECTIONS))}"
                              f"sections are {', '.join(TRAIN_SECTIONS)}")
        kwargs[name] = _build_section(name, TRAIN_SECTIONS[name], values)
    return TrainConfig(**kwargs)


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a config dataclass (and of the dataclasses it extends), read from source."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                    docs[node.target.id] = " ".join(nxt.value.value.split())  # one line, for config.toml
    return docs


SECTION_DOCS = {
    "agent": "The loop: step budget, retries, dry run.",
    "device": "Which device to drive and where it starts.",
    "settle": "Waiting for the screen to stop changing after each action (instead of fixed sleeps).",
    "policy": "Who decides the next action.",
    "ocr": "The offline OCR policy: grounds the instruction's target text on the screenshot's pixels.",
    "model": "The vision-language model: its id picks a preset (family, pixel budget, coordinates, decoding).",
    "guard": ("Checks between decide and act (agent run; eval and online sessions run in sandboxes without one). "
              "Safe by default: local URL schemes refused, irreversible actions and closing hotkeys need a yes."),
    "record": "Trajectories on disk: runs/<run_id>/<episode_id>/{episode.json, steps.jsonl, frames/}.",
}


def _toml_value(value: Any) -> str:
    if value is None:
        return f'"{UNSET}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def section_docs() -> dict[str, str]:
    """Each section's one-line comment in config.toml (a device kind's is its registry summary)."""
    kinds = all_device_kinds()
    return {**SECTION_DOCS, **{kind.name: kind.summary for kind in kinds},
            **{kind.record_section: f"How agent record --device {kind.name} reads a person (docs/recording.md)."
                for kind in kinds if kind.record_config is not None}}


def _render_sections(sections: dict[str, type], docs_by_section: dict[str, str]) -> list[str]:
    lines: list[str] = []
    for name, cls in sections.items():
        lines += ["", f"# {docs_by_section[name]}", f"[{name}]"]
        docs = field_docs(cls)
        defaults = cls()
        for f in dataclasses.fields(cls):
            lines.append(f"# {docs.get(f.name, '')}")
            value = getattr(defaults, f.name)
            lines.append(f"# {f.name} = ...  (unset)" if value is None else f"{f.name} = {_toml_value(value)}")
    return lines


def render_train_defaults() -> str:
    """configs/train.toml: every training option at its default, documented."""
    from train.config import TRAIN_SECTION_DOCS, TRAIN_SECTIONS

    lines = [
        "# handeye training configuration: agent train --config configs/train.toml [--set section.key=value]",
        "# Every option is listed with its default; delete what you don't change. Docs: docs/training.md",
    ]
    return "\n".join(lines + _render_sections(TRAIN_SECTIONS, TRAIN_SECTION_DOCS)) + "\n"


def render_defaults() -> str:
    """config.toml with every option at its default and its documentation as a comment."""
    lines = [
        "# handeye configuration. Every option is listed with its default; delete what you don't change.",
        "# Override any option on the command line: agent run --set section.key=value",
        "# Docs: docs/configuration.md",
    ]
    lines += _render_sections(config_sections(), section_docs())
    lines += [
        "",
        "# Credentials, only ever read from environment variables: NAME = \"env:VARIABLE\".",
        "# An action types a secret as {{secret:NAME}}; trajectories keep the placeholder, never the value.",
        "[secrets]",
        "# login_password = \"env:HANDEYE_LOGIN_PASSWORD\"",
    ]
    return "\n".join(lines) + "\n"
