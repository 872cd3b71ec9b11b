"""The parts of a run built from a config: the policy, the device, the guard, and closing what was built.

    policy = build_policy(cfg)             # ocr, scripted, or a model behind transformers / an OpenAI server
    device = build_device(cfg, url)        # web (Playwright), desktop (X11) or android (adb)
    guard = build_guard(cfg, confirm)      # refuse / confirm action kinds, forbidden regions
    ...
    await close_policy(policy)             # a model policy's backend holds a model or an HTTP client

The command line (``agent.cli``) and tests use these. Heavy libraries (Playwright, torch, the OCR engine) are
imported only inside the builder that needs them, so importing this module costs nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.config import Config
    from agent.guard import Guard
    from devices.base import Device
    from policy.base import Policy
    from policy.model import ModelPolicy

def build_policy(cfg: Config, kind: str | None = None) -> Policy:
    """The policy ``cfg.policy.kind`` names: ``ocr`` (the default), ``scripted`` (``policy.script``, a JSON list of
    actions), or ``transformers`` / ``openai`` (a model, see ``build_model_policy``) prompted for the screen of
    device kind ``kind`` (default: the configured ``device.kind``).

    Raises ``PolicyUnavailable`` with what to give when the config does not say enough (no script, no model id, no
    server URL, an unset API key variable), or when the model or its preset cannot be loaded.
    """
    from policy.errors import PolicyError, PolicyUnavailable

    if cfg.policy.kind in ("transformers", "openai"):
        try:
            return build_model_policy(cfg, kind)
        except (PolicyError, ValueError) as e:
            raise PolicyUnavailable(str(e)) from None

    if cfg.policy.kind == "scripted":
        from policy.scripted import ScriptedPolicy

        if not cfg.policy.script:
            raise PolicyUnavailable("the scripted policy needs a script: --script FILE (a JSON list of actions)")
        return ScriptedPolicy.from_file(cfg.policy.script)
    from policy.ocr import OcrPolicy

    return OcrPolicy(cfg.ocr)


def build_model_policy(cfg: Config, kind: str | None = None) -> ModelPolicy:
    """A model policy: ``model.id``'s preset (prompts, resizing, parsing; the prompt variant its family uses on the
    screen of device kind ``kind``, default the configured ``device.kind``, unless ``model.variant`` says otherwise)
    with the backend ``policy.kind`` names,
    ``transformers`` (the model loaded in this process, ``model.device`` / ``dtype`` / ``adapter``) or ``openai``
    (an OpenAI-compatible server at ``model.url``, its key read from the variable ``model.api_key_env``).
    ``model.samples`` answers are sampled per observation.

    The backend holds a model or an HTTP client: close it with ``close_policy`` when done.
    """
    from devices.registry import device_kind
    from policy.errors import PolicyUnavailable
    from policy.model import ModelPolicy

    m = cfg.model
    if not m.id:
        raise PolicyUnavailable("say which model: --policy transformers:PATH_OR_ID, or --model ID with --policy openai:URL")
    preset = m.preset(device_kind(kind or cfg.device.kind).screen)
    if cfg.policy.kind == "transformers":
        from policy.backends.hf import TransformersBackend

        backend: Any = TransformersBackend(m.id, preset=preset, device=m.device, dtype=m.dtype, adapter=m.adapter or None)
    else:
        from policy.backends.openai import OpenAIBackend

        if not m.url:
            raise PolicyUnavailable("the openai policy needs the server's URL: --policy openai:http://HOST:PORT")
        api_key = os.environ.get(m.api_key_env) if m.api_key_env else None
        if m.api_key_env and api_key is None:
            raise PolicyUnavailable(f"model.api_key_env names {m.api_key_env}, which is not set; export it first")
        backend = OpenAIBackend(m.url, m.id, api_key=api_key, timeout_s=m.timeout_s,
                                check_image_tokens=m.check_image_tokens)
    return ModelPolicy(backend, preset, n=m.samples)


async def close_policy(policy: Any) -> None:
    """Close the backend of a policy from ``build_policy`` where it has one (a model policy's: its HTTP client, or
    the model it loaded); OCR and scripted policies, and None, have nothing to close."""
    backend = getattr(policy, "backend", None)
    if backend is not None:
        await backend.close()


def build_device(cfg: Config, url: str = "") -> Device:
    """The device ``cfg.device.kind`` names (``devices.registry``), not started yet, from its config section: the
    web opens ``url`` in its own browser, the desktop drives the X display ``desktop.display``, Android the phone
    ``android.serial``. The driver libraries are imported only when it is built."""
    from devices.registry import device_kind

    return device_kind(cfg.device.kind).build(cfg.section(), cfg.settle, url=url)


def build_guard(cfg: Config) -> Guard:
    """The guard of ``agent run``, safe by default (agent/guard.py): ``open_url`` only to ``guard.allow_schemes``
    (and ``guard.allow_domains`` when set), never to link-local or metadata addresses unless
    ``guard.allow_link_local``, ``open_app`` only to ``guard.allow_packages`` when set, the kinds
    ``guard.refuse`` refuses and ``guard.confirm`` asks about, the ``forbidden_regions``, and a yes before
    irreversible-looking targets (``guard.irreversible``) and closing hotkeys (``guard.closing_hotkeys``).

    Asking is the runner's job (it puts the question to the person, ``agent.person``); with nobody there, what needs
    a yes is refused. ``agent eval`` and online sessions use no guard: their environments are sandboxes.
    """
    from agent.guard import (IRREVERSIBLE_WORDS, GuardChain, HotkeyGuard, IrreversibleGuard, KindGuard,
                             PackageGuard, RegionGuard, UrlGuard)
    from devices.actions import ActionKind

    g = cfg.guard
    guards: list[Any] = [UrlGuard(tuple(s.lower() for s in g.allow_schemes), tuple(d.lower() for d in g.allow_domains),
                                  link_local=g.allow_link_local)]
    if g.allow_packages:
        guards.append(PackageGuard(tuple(g.allow_packages)))
    if g.refuse or g.confirm:
        guards.append(KindGuard(frozenset(ActionKind(k) for k in g.refuse), frozenset(ActionKind(k) for k in g.confirm)))
    if g.forbidden_regions:
        guards.append(RegionGuard(g.forbidden_regions))
    if g.irreversible:
        guards.append(IrreversibleGuard((*IRREVERSIBLE_WORDS, *g.irreversible_words)))
    if g.closing_hotkeys:
        guards.append(HotkeyGuard())
    return GuardChain(guards)
