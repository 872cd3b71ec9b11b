"""Where a fleet's broker is, how to reach it, and the topics of one session.

A broker address is a URL: ``mqtt://HOST[:PORT][/PREFIX]`` (plain TCP, port 1883) or ``mqtts://...`` (TLS, port
8883). ``PREFIX`` is the session's topic prefix (default ``handeye/default``): every topic of the session lies under
it, so several sessions share one broker. A user name may be given in the URL (``mqtt://actor-3@host``); the
password never is (it would show in ``ps`` and shell histories): it comes from the variable ``HANDEYE_MQTT_PASSWORD``
or a file (``--password-file``). Topics (docs/fleet.md):

    PREFIX/samples/ACTOR    GroupMessage, QoS 1              PREFIX/policy           Announcement, retained
    PREFIX/episodes/ACTOR   EpisodeMessage, QoS 1            PREFIX/status/ACTOR     ActorStatus, retained + will
    PREFIX/learner/status   the learner's status (JSON), retained   PREFIX/learner/alive  up/stopped, down (its will)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from agent.errors import FleetError

PASSWORD_ENV = "HANDEYE_MQTT_PASSWORD"
DEFAULT_PREFIX = "handeye/default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


def check_actor_name(name: str) -> str:
    """``name`` if it can name an actor in a topic (letters, digits, ``_.-``, at most 64, no ``/ + #``)."""
    if not _NAME.match(name or ""):
        raise FleetError(f"actor name {name!r} cannot be a topic level: use letters, digits, '_', '.' and '-' (at "
                         f"most 64, starting with a letter or digit)")
    return name


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """How to reach the broker (see the module docstring)."""

    host: str
    port: int = 1883
    prefix: str = DEFAULT_PREFIX
    tls: bool = False
    username: str | None = None
    password: str | None = None
    ca_file: str = ""
    """The CA certificate that signed the broker's certificate (mqtts; default: the system's CAs)."""
    keepalive: int = 10
    """Seconds between pings: a dead connection is noticed within about 1.5x this."""

    @property
    def url(self) -> str:
        """The address without credentials (for messages and status lines)."""
        user = f"{self.username}@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}/{self.prefix}"


def parse_broker(url: str, *, password_file: str = "", ca_file: str = "") -> BrokerConfig:
    """A ``BrokerConfig`` from ``mqtt://[USER@]HOST[:PORT][/PREFIX]`` or ``mqtts://...`` (module docstring)."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise FleetError(f"broker {url!r} is not mqtt://HOST[:PORT][/PREFIX] or mqtts://HOST[:PORT][/PREFIX]")
    if parts.password is not None:
        raise FleetError(f"the broker URL carries a password; put it in ${PASSWORD_ENV} or a file (--password-file) "
                         f"instead, where ps and shell histories do not show it")
    try:
        port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
    except ValueError as exc:
        raise FleetError(f"broker {url!r}: {exc}") from None
    prefix = parts.path.strip("/") or DEFAULT_PREFIX
    if not _PREFIX.match(prefix):
        raise FleetError(f"topic prefix {prefix!r} (the URL's path) may hold letters, digits, '_', '.', '-' and '/' "
                         f"between levels; no wildcards")
    password = None
    if password_file:
        try:
            password = Path(password_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise FleetError(f"cannot read the broker password file {password_file}: {exc.strerror or exc}") from None
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV]
    if ca_file and not Path(ca_file).is_file():
        raise FleetError(f"the CA certificate {ca_file} does not exist")
    return BrokerConfig(host=parts.hostname, port=port, prefix=prefix, tls=parts.scheme == "mqtts",
                        username=unquote(parts.username) if parts.username else None, password=password,
                        ca_file=ca_file)


@dataclass(frozen=True, slots=True)
class Topics:
    """The topics of one session (see the module docstring)."""

    prefix: str

    def samples(self, actor: str = "+") -> str:
        return f"{self.prefix}/samples/{actor}"

    def episodes(self, actor: str = "+") -> str:
        return f"{self.prefix}/episodes/{actor}"

    def status(self, actor: str = "+") -> str:
        return f"{self.prefix}/status/{actor}"

    @property
    def policy(self) -> str:
        return f"{self.prefix}/policy"

    @property
    def learner(self) -> str:
        """The learner's own retained status (``agent.fleet.record``)."""
        return f"{self.prefix}/learner/status"

    @property
    def learner_alive(self) -> str:
        """``up`` while the learner is connected; the broker puts ``down`` there when its connection dies (its last
        will), ``stopped`` when it ended cleanly."""
        return f"{self.prefix}/learner/alive"

    def parse(self, topic: str) -> tuple[str, str]:
        """(kind, actor) of a topic of this session: kind samples, episodes, status or policy; ("", "") otherwise."""
        if topic == self.policy:
            return "policy", ""
        head, _, actor = topic.rpartition("/")
        for kind in ("samples", "episodes", "status"):
            if head == f"{self.prefix}/{kind}" and _NAME.match(actor):
                return kind, actor
        return "", ""


REFUSED_CODES = frozenset({4, 5, 134, 135, 138, 140})
"""CONNACK codes that refuse the client's credentials: MQTT 3.1.1's 4 (bad user name or password) and 5 (not
authorised), and the MQTT 5 codes paho reports for them (134, 135), banned (138), bad authentication method (140).
Retrying with the same credentials cannot help."""


def refusal(exc: BaseException, broker: BrokerConfig) -> str | None:
    """What to fix when a failed connection (``exc``, an ``aiomqtt.MqttError``) is the broker refusing this client, or
    its certificate not verifying; None for a failure that retrying may cure (no route, a closed port, a broker that
    restarts)."""
    import aiomqtt
    from paho.mqtt.reasoncodes import ReasonCode

    rc = exc.rc if isinstance(exc, aiomqtt.MqttCodeError) else None
    if (rc.value if isinstance(rc, ReasonCode) else rc) in REFUSED_CODES:
        who = f"user {broker.username!r}" if broker.username else "a client without a user name (give one: USER@HOST)"
        password = ("with the password given" if broker.password else
                    f"without a password (none in ${PASSWORD_ENV} or --password-file)")
        return (f"the broker {broker.url} refused {who} {password} ({exc}); check the user name, its password and "
                f"that the broker's password_file has that user (mosquitto_passwd; docs/fleet.md, Two machines)")
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        fix = (f"is the broker's certificate signed by {broker.ca_file}, and does its subjectAltName name "
               f"{broker.host}?" if broker.ca_file else
               "give the CA certificate that signed it with --ca FILE")
        return (f"the certificate of the broker {broker.host}:{broker.port} does not verify ({exc}): {fix} "
                f"(docs/fleet.md, Two machines)")
    if "WRONG_VERSION_NUMBER" in str(exc):
        return (f"{broker.host}:{broker.port} does not speak TLS ({exc}): use mqtt:// for a plain listener, or the "
                f"port of the broker's TLS listener")
    return None
