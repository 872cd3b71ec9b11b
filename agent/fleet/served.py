"""A fleet actor whose policy is an OpenAI-compatible server (vLLM on a GPU box): new versions go to the server.

vLLM loads LoRA adapters at run time when started with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and
``--enable-lora`` (docs/fleet.md has the command): ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` adds
one under a name, ``POST /v1/unload_lora_adapter {"lora_name"}`` removes it, and a chat request whose ``model`` is
that name is answered with it. ``ServedAdapters`` is the actors' backend then:

- ``load_adapter(folder, version)`` copies the checked files into ``folder_root/<version>/`` (the server reads the
  adapter from there, now and whenever it evicts and reloads it, so the copy stays until the version is unloaded)
  and asks the server to load it under the version's name (``learner@42``); a server that has it already (another
  actor sharing the server loaded it first) is fine. The files were checked against the signed announcement by
  ``train.adapters.load_verified``, which hands over a private copy of the bytes it hashed.
- ``generate`` asks for the active version by name, through one ``policy.backends.openai.OpenAIBackend`` per
  version, so a version switch in the middle of another actor's request never mislabels its answer; every
  ``Generation`` says which version produced it. With vLLM the samples carry the server's token ids
  (``return_tokens_as_token_ids``) and log-probs, which the learner's importance weights need.
- ``prune`` unloads versions older than the newest ``keep`` (2: an actor of the same server may still be finishing a
  request with the previous one).

The server must see ``folder_root`` at the same path (the same machine, or a shared mount): vLLM reads
``lora_path`` from its own file system.

Full fine-tuning (``model.finetune=full``) cannot act through a server: vLLM's runtime endpoints load LoRA adapters
only, and swapping a served model's weights would need the server's own weight-update machinery (a collective group
between learner and server) that an actor cannot drive. ``agent actor --policy openai:URL`` is therefore refused at
start when the config fine-tunes every weight (``agent.fleet.actor``), and a full-weight version that reaches a
served actor anyway (a learner with another config) is refused by ``load_served`` with the same reason.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from policy.backends.base import Generation, GenerationRequest
from policy.errors import BackendError
from train.adapters import AdapterRef, LoadTimes, VersionKind, load_verified

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9_.@-]")
SERVED_FULL_WEIGHTS = ("{what}: a policy server (--policy openai:URL) takes LoRA adapters at run time only (vLLM's "
                       "/v1/load_lora_adapter), not a fully fine-tuned model's weights; act with the model in the "
                       "actor's process (leave --policy out), or train with model.finetune=lora (docs/fleet.md)")
"""Why a served actor cannot act with full-weight versions; ``{what}`` names the version or the setting."""


class ServedAdapters:
    """The actors' backend over a policy server with runtime LoRA loading (see the module docstring)."""

    name = "openai-lora"

    def __init__(self, base_url: str, base_model: str, *, folder_root: str | Path, api_key: str | None = None,
                 keep: int = 2, timeout_s: float = 60.0) -> None:
        from policy.backends.openai import OpenAIBackend

        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.base_model, self.api_key, self.keep, self.timeout_s = base_model, api_key, max(1, keep), timeout_s
        self.folder_root = Path(folder_root).resolve()
        self.folder_root.mkdir(parents=True, exist_ok=True)
        self._make = lambda model: OpenAIBackend(self.base_url, model, api_key=api_key, timeout_s=timeout_s)
        self._clients: dict[str, Any] = {}
        self._base = self._make(base_model)
        self._retired: list[Any] = []
        self._active: str | None = None

    @property
    def adapter_version(self) -> str | None:
        return self._active

    @property
    def loaded_adapters(self) -> tuple[str, ...]:
        return tuple(self._clients)

    def _post(self, route: str, body: dict[str, Any]) -> tuple[int, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(f"{self.base_url}{route}", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError as exc:
            raise BackendError(f"the policy server {self.base_url} cannot be reached ({exc}); is `vllm serve` "
                               f"running there?") from exc

    def load_adapter(self, path: str | Path, version: str) -> None:
        """Copy the adapter into the folder the server reads and load it there as ``version``; make it active."""
        dest = self.folder_root / _SAFE.sub("_", version)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(path, dest)
        status, text = self._post("/v1/load_lora_adapter", {"lora_name": version, "lora_path": str(dest)})
        if status == 404 and "load_lora_adapter" in text or status == 405:
            raise BackendError(f"the policy server {self.base_url} does not load adapters at run time: start it with "
                               f"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora (docs/fleet.md)")
        if status >= 400 and "already" not in text.lower():
            raise BackendError(f"the policy server refused adapter {version} ({status}): {text[:300]}")
        self._clients.setdefault(version, self._make(version))
        self._active = version
        log.info("the policy server %s acts with %s", self.base_url, version)

    def unload_adapter(self, version: str) -> None:
        """Ask the server to drop ``version`` (not the active one) and remove its copy."""
        if version == self._active:
            raise BackendError(f"adapter {version!r} is the active one; load another before unloading it")
        status, text = self._post("/v1/unload_lora_adapter", {"lora_name": version})
        if status >= 400 and status != 404:
            log.warning("the policy server did not unload %s (%s): %s", version, status, text[:200])
        client = self._clients.pop(version, None)
        if client is not None:
            self._retired.append(client)
        shutil.rmtree(self.folder_root / _SAFE.sub("_", version), ignore_errors=True)

    def prune(self) -> list[str]:
        """Unload every version but the newest ``keep``; returns the ones unloaded."""
        old = [v for v in self._clients if v != self._active][: max(0, len(self._clients) - self.keep)]
        for version in old:
            self.unload_adapter(version)
        return old

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        version = self._active
        client = self._clients.get(version, self._base) if version else self._base
        gens = await client.generate(requests)
        return [replace(g, adapter_version=version) for g in gens]

    def describe(self) -> dict[str, Any]:
        return {**self._base.describe(), "backend": self.name, "adapter_version": self._active}

    async def close(self) -> None:
        for client in [self._base, *self._clients.values(), *self._retired]:
            await client.close()


def load_served(backend: ServedAdapters, ref: AdapterRef, *, root: str | Path) -> LoadTimes:
    """``train.adapters.load_verified`` for a policy server: the files are checked, handed to the server, and
    versions older than the newest ``backend.keep`` are unloaded. Full weights are refused (see the module
    docstring)."""
    if ref.kind is VersionKind.FULL:
        raise BackendError(SERVED_FULL_WEIGHTS.format(what=ref.title))
    times = load_verified(backend, ref, root=root, unload_others=False)
    backend.prune()
    return times
