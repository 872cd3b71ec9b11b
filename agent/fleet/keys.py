"""The fleet key: only the learner may announce a version.

Every announcement on the ``policy`` topic is signed: HMAC-SHA256 under the fleet key over the canonical JSON
(sorted keys, no spaces, ASCII) of ``{"signed": SIGNED, "session": ..., "issued_at": ..., "ref": ...}``, hex-encoded:
the session (the fleet's topic prefix), the time of the signature and the whole ``AdapterRef`` (its version, step,
files, their sha256 and sizes). An actor checks the signature before it looks at the announcement; one that does not
match (or a key fingerprint it does not know), or was signed for another session under the same key, is ignored and
counted, and the actor keeps the version it has. The version's files are then checked against the announced sha256
hashes and sizes (``train.adapters``, ``agent.fleet.versions``), so a signed announcement vouches for the bytes too.

Signed bytes name the session and a time so that a valid announcement cannot be used elsewhere or later: the actor
(``agent.fleet.mqtt``) takes only announcements newer than the one it runs (``newer``: a higher step, or the same
step signed later), so replaying an old one does not move it back. An announcement of the format before sessions
and times (its signature covered the ``AdapterRef`` alone) is refused by ``train.wire`` with a message saying so.

Key handling (docs/fleet.md): the key is 32 random bytes written as 64 hex digits (``agent fleet key FILE``
writes one, readable by its owner only). Every learner and actor of a session needs the same key, from the
variable ``HANDEYE_FLEET_KEY`` or a file named with ``--fleet-key FILE``; a file readable by others is refused.
HMAC is a shared secret: a machine that holds the key could sign too, so give the key only to machines you trust
to run actors (an actor needs it to check signatures). The broker's ACL (docs/fleet.md) additionally lets only
the learner's user publish on ``policy``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from pathlib import Path

from agent.errors import BadSignature, FleetError
from train.adapters import AdapterRef
from train.messages import Announcement

KEY_ENV = "HANDEYE_FLEET_KEY"
MIN_KEY_BYTES = 16
SIGNED = "handeye-announcement/2"
"""What the signed bytes say they are (the format before it signed ``AdapterRef.to_json()`` alone)."""


def canonical_json(ref: AdapterRef, session: str, issued_at: float) -> bytes:
    """The bytes a signature covers: the version (all of ``ref``), the session and the time of the signature."""
    return json.dumps({"signed": SIGNED, "session": session, "issued_at": issued_at, "ref": ref.to_json()},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def key_id(key: bytes) -> str:
    """A fingerprint that names the key without revealing it (the first 16 hex digits of its sha256)."""
    return hashlib.sha256(b"handeye-fleet-key:" + key).hexdigest()[:16]


def _parse(text: str, where: str) -> bytes:
    text = text.strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = text.encode("utf-8")  # a passphrase: accepted, but the hex form is what `agent fleet key` writes
    if len(key) < MIN_KEY_BYTES:
        raise FleetError(f"the fleet key from {where} is {len(key)} bytes; use at least {MIN_KEY_BYTES} (agent fleet "
                         f"key FILE writes 32 random bytes)")
    return key


def load_key(key_file: str = "") -> bytes:
    """The fleet key from ``key_file`` or, without one, the variable ``HANDEYE_FLEET_KEY``."""
    if key_file:
        path = Path(key_file)
        try:
            mode = path.stat().st_mode
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise FleetError(f"cannot read the fleet key file {key_file}: {exc.strerror or exc}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise FleetError(f"the fleet key file {key_file} can be read by others (mode {stat.S_IMODE(mode):o}); "
                             f"chmod 600 {key_file}")
        return _parse(text, key_file)
    if os.environ.get(KEY_ENV):
        return _parse(os.environ[KEY_ENV], f"${KEY_ENV}")
    raise FleetError(f"no fleet key: set ${KEY_ENV} or pass --fleet-key FILE (the same on the learner and every "
                     f"actor; agent fleet key FILE makes one)")


def write_key(path: str | Path) -> str:
    """Write a new random key to ``path`` (mode 600; an existing file is refused); returns its fingerprint."""
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise FleetError(f"{path} exists; a new key would lock out every actor that has the old one: remove it "
                         f"first if you mean to replace it") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key.hex() + "\n")
    return key_id(key)


def sign(ref: AdapterRef, key: bytes, session: str, issued_at: float | None = None) -> Announcement:
    """``ref`` signed with ``key`` for ``session`` (the topic prefix), at ``issued_at`` (default: now)."""
    at = time.time() if issued_at is None else issued_at
    signature = hmac.new(key, canonical_json(ref, session, at), hashlib.sha256).hexdigest()
    return Announcement(ref, key_id(key), signature, session=session, issued_at=at)


def verify(announcement: Announcement, key: bytes, session: str) -> AdapterRef:
    """The announced ``AdapterRef`` once its signature checks out under ``key`` and it was signed for ``session``;
    ``BadSignature`` if not."""
    a = announcement
    if a.key_id != key_id(key):
        raise BadSignature(f"announcement of {a.ref.version} is signed with key {a.key_id!r:.40}, this actor holds "
                           f"{key_id(key)!r}: a learner with another fleet key, or a forgery")
    expected = hmac.new(key, canonical_json(a.ref, a.session, a.issued_at), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, a.signature):
        raise BadSignature(f"announcement of {a.ref.version}: its signature does not match the fleet key; it was "
                           f"altered or forged: ignored")
    if a.session != session:
        raise BadSignature(f"announcement of {a.ref.version} was signed for session {a.session!r:.80}, this actor is "
                           f"in {session!r}: a replay from another session under the same key: ignored")
    return a.ref


def newer(announcement: Announcement, than: Announcement | None) -> bool:
    """Whether ``announcement`` may replace ``than`` (the one an actor runs): a higher step, or the same step signed
    later (a learner that restarted and announced its version again). A replayed old announcement is not newer."""
    if than is None:
        return True
    return (announcement.ref.step, announcement.issued_at) > (than.ref.step, than.issued_at)
