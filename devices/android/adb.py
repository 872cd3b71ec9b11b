"""The adb transport: the adb server, the phone's serial, and every call to the phone with its timeout and retries.

Calls go through an adb server with adbutils, one connection per call: ``host:transport:SERIAL``
then a device service (``shell:`` or ``exec:``), whose output is read until the phone closes it.
Every call has a timeout (``call_timeout_s``). When the phone is offline or gone from the adb
server, calls are retried with backoff (network serials ``host:port`` are re-``connect``-ed) until
``offline_deadline_s``, then DeviceDisconnected. An action whose connection broke *after* it was
sent is not re-sent (it may have happened): that is a DeviceError saying so.

The adb server is the user's unless handeye started it: with ``android.start_server`` and nothing listening on
the local port, ``AdbTransport.connect`` starts one, and the last transport of this process using it stops it
(adb's ``host:kill``) when it closes, so no server outlives the run that started it. A server that was already
running is never stopped.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from devices.android.config import AndroidConfig
from devices.errors import DeviceDisconnected, DeviceError, DeviceTimeout, DeviceUnavailable

log = logging.getLogger(__name__)

_RC_MARKER = b"HANDEYE_RC="


@dataclass(frozen=True, slots=True)
class AndroidDeviceInfo:
    """One entry of the adb server's device list."""

    serial: str
    state: str
    model: str = ""
    product: str = ""
    transport_id: str = ""

    def __str__(self) -> str:
        extra = f"  model:{self.model}" if self.model else ""
        hint = {
            "unauthorized": "  (unlock the phone and accept the USB debugging prompt)",
            "offline": "  (replug the cable, or `adb connect` it again)",
        }.get(self.state, "")
        return f"{self.serial}  {self.state}{extra}{hint}"


class _NotDelivered(Exception):
    """The command never reached the phone (offline, not listed, adb server down): safe to retry."""


class _Broken(Exception):
    """The connection broke after the command was sent: it may or may not have run."""


class _Refused(Exception):
    """The phone refused the service (e.g. ``exec:`` before Android 5)."""


# -- the adb server --------------------------------------------------------------------------------
def server_listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port (the adb server, we assume)."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def adb_client(host: str, port: int) -> Any:
    """An adbutils client for the server at host:port, checked to be listening (never started here)."""
    try:
        import adbutils
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DeviceUnavailable("adbutils is not installed; run `pip install 'handeye[android]'`") from e
    if not server_listening(host, port):
        raise DeviceUnavailable(
            f"no adb server is listening at {host}:{port}; start one with `adb -P {port} start-server` "
            "(or set android.adb_host / android.adb_port)"
        )
    return adbutils.AdbClient(host, port, socket_timeout=30)


def _start_server(port: int) -> None:
    import adbutils

    exe = adbutils.adb_path()
    try:
        subprocess.run([exe, "-P", str(port), "start-server"], timeout=30, capture_output=True, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise DeviceUnavailable(f"could not start an adb server on port {port} with {exe}: {e}") from e


def kill_server(host: str, port: int, *, wait_s: float = 5.0) -> None:
    """Stop the adb server at host:port as ``adb kill-server`` does (the host protocol's ``host:kill``), then wait
    until it no longer listens. Spoken directly: adbutils would start a server when none answers."""
    request = b"host:kill"
    try:
        with socket.create_connection((host, port), timeout=5) as conn:
            conn.sendall(b"%04x%s" % (len(request), request))
            conn.recv(4)  # OKAY, or nothing when the server went away first
    except OSError as e:
        log.debug("adb server at %s:%s: host:kill: %s", host, port, e)
    deadline = time.monotonic() + wait_s
    while server_listening(host, port) and time.monotonic() < deadline:
        time.sleep(0.05)


class _StartedServers:
    """The adb servers this process started, with how many connected transports use each. The last one to let go
    stops it; a server that was listening before is never entered here, so never stopped. One still held when the
    process exits (a device never closed) is stopped then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[tuple[str, int], int] = {}
        self._exit_hook = False

    def acquire(self, host: str, port: int, start: bool) -> tuple[Any, bool]:
        """(a client for host:port, whether this caller holds a server this process started), starting a local
        server when ``start`` and none listens."""
        key = (host, port)
        with self._lock:
            if start and host in _LOCAL_HOSTS and not server_listening(host, port):
                _start_server(port)
                self._users[key] = 0
                if not self._exit_hook:
                    atexit.register(self._stop_all)
                    self._exit_hook = True
                log.info("started an adb server on port %s; it is stopped when the device closes", port)
            try:
                client = adb_client(host, port)
            except DeviceUnavailable:
                if self._users.get(key) == 0:  # started just now yet not listening: nobody holds it
                    del self._users[key]
                raise
            if key not in self._users:
                return client, False
            self._users[key] += 1
            return client, True

    def release(self, host: str, port: int) -> None:
        key = (host, port)
        with self._lock:
            self._users[key] -= 1
            if self._users[key] > 0:
                return
            del self._users[key]
            kill_server(host, port)
            log.info("stopped the adb server on port %s that this run started", port)

    def _stop_all(self) -> None:
        with self._lock:
            for host, port in list(self._users):
                kill_server(host, port, wait_s=1.0)
            self._users.clear()


_STARTED = _StartedServers()


def list_devices(host: str = "127.0.0.1", port: int = 5037) -> list[AndroidDeviceInfo]:
    """Every device the adb server at host:port knows, in any state (for ``agent devices``)."""
    client = adb_client(host, port)
    try:
        infos = client.list(extended=True)
    except Exception as e:
        raise DeviceUnavailable(f"the adb server at {host}:{port} did not list its devices: {e}") from e
    return [
        AndroidDeviceInfo(
            i.serial, i.state, i.tags.get("model", ""), i.tags.get("product", ""), i.tags.get("transport_id", "")
        )
        for i in infos
    ]


def is_network_serial(serial: str) -> bool:
    """Whether a serial is a network phone's ``host:port`` (which ``adb connect`` can reconnect)."""
    host, _, port = serial.rpartition(":")
    return bool(host) and port.isdigit()


# -- one phone -------------------------------------------------------------------------------------
class AdbTransport:
    """The calls to one phone: ``connect`` (blocking, picks the serial), then ``call`` / ``shell``."""

    def __init__(self, config: AndroidConfig) -> None:
        self.config = config
        self.client: Any = None
        """The adbutils client; None until ``connect`` and after ``close``."""
        self.serial = ""
        self._holds_server = False
        """Whether this transport counts among the users of a server this process started."""

    def connect(self) -> None:
        """Reach the adb server (starting it when configured) and choose the phone; blocking."""
        cfg = self.config
        self.client, self._holds_server = _STARTED.acquire(cfg.adb_host, cfg.adb_port, cfg.start_server)
        try:
            self.serial = self._pick_serial()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Forget the server; the last transport using a server this process started stops it (blocking)."""
        self.client = None
        if self._holds_server:
            self._holds_server = False
            _STARTED.release(self.config.adb_host, self.config.adb_port)

    def _pick_serial(self) -> str:
        """The serial to drive, or DeviceUnavailable saying which phones there are and what to do."""
        cfg = self.config
        infos = self.client.list(extended=True)
        if cfg.serial and not any(i.serial == cfg.serial for i in infos) and is_network_serial(cfg.serial):
            try:
                self.client.connect(cfg.serial, timeout=cfg.call_timeout_s)
            except Exception as e:  # reported below with the device list
                log.debug("adb connect %s failed: %s", cfg.serial, e)
            infos = self.client.list(extended=True)
        listing = ", ".join(f"{i.serial} ({i.state})" for i in infos) or "none"
        where = f"the adb server at {cfg.adb_host}:{cfg.adb_port}"
        if cfg.serial:
            match = [i for i in infos if i.serial == cfg.serial]
            if not match:
                raise DeviceUnavailable(
                    f"no phone with serial {cfg.serial!r} at {where}; connected: {listing}. "
                    "Check `adb devices`, the cable, or `adb connect HOST:PORT` for network phones"
                )
            info = match[0]
        else:
            if not infos:
                raise DeviceUnavailable(
                    f"no phone is connected to {where}: plug one in with USB debugging enabled "
                    "(Settings > Developer options), or `adb connect HOST:PORT`"
                )
            ready = [i for i in infos if i.state == "device"]
            if len(ready) > 1:
                raise DeviceUnavailable(
                    f"{len(ready)} phones are connected ({listing}); choose one with android.serial "
                    "or --device android:SERIAL"
                )
            info = ready[0] if ready else infos[0]
        _check_ready(info)
        return info.serial

    # -- calls ------------------------------------------------------------------------------------
    def _exec_sync(self, service: str, timeout: float) -> bytes:
        """Run one device service through the adb server and read its output until it closes."""
        import adbutils

        cfg = self.config
        if not server_listening(cfg.adb_host, cfg.adb_port):
            raise _NotDelivered(f"the adb server at {cfg.adb_host}:{cfg.adb_port} is not running")
        try:
            conn = self.client.make_connection(timeout=timeout)
        except adbutils.AdbError as e:
            raise _NotDelivered(f"cannot reach the adb server: {e}") from e
        try:
            _open_service(conn, self.serial, service)
            return _read_to_end(conn.conn, service, timeout)
        finally:
            conn.close()

    async def call(self, service: str, what: str, *, idempotent: bool = True, timeout: float | None = None) -> bytes:
        """Run a service with the timeout and offline retries described in the module docstring."""
        if self.client is None:
            raise DeviceError(f"cannot {what}: the android device is not started; call `await device.start()` first")
        timeout = timeout or self.config.call_timeout_s
        start = time.monotonic()
        delay = 0.2
        warned = False
        while True:
            try:
                return await asyncio.wait_for(asyncio.to_thread(self._exec_sync, service, timeout), timeout + 5)
            except asyncio.TimeoutError as e:
                raise DeviceTimeout(f"cannot {what}: adb did not answer within {timeout} s") from e
            except _Refused as e:
                raise DeviceError(f"cannot {what}: the phone refused the service ({e})") from e
            except _Broken as e:
                if not idempotent:
                    raise DeviceError(
                        f"the connection to {self.serial} broke while it was told to {what} ({e}); "
                        "the action may or may not have happened: observe the screen again"
                    ) from e
                reason = f"connection lost ({e})"
            except _NotDelivered as e:
                reason = str(e)
            elapsed = time.monotonic() - start
            if elapsed >= self.config.offline_deadline_s:
                raise DeviceDisconnected(
                    f"cannot {what}: phone {self.serial} has been unreachable for {elapsed:.1f} s ({reason}); "
                    "check the cable or network, `adb devices`, and `adb connect HOST:PORT` for network phones"
                )
            if not warned:
                log.warning("phone %s is unreachable (%s); retrying for up to %.0f s",
                            self.serial, reason, self.config.offline_deadline_s)
                warned = True
            if is_network_serial(self.serial):
                await asyncio.to_thread(self._reconnect)
            remaining = self.config.offline_deadline_s - (time.monotonic() - start)
            await asyncio.sleep(max(0.0, min(delay, remaining)))
            delay = min(delay * 2, 2.0)

    def _reconnect(self) -> None:
        cfg = self.config
        if not server_listening(cfg.adb_host, cfg.adb_port):
            return
        try:
            states = {i.serial: i.state for i in self.client.list()}
            if states.get(self.serial) == "device":
                return
            if self.serial in states:
                # adb keeps a dropped network transport "offline" and retries it only every ~10 s:
                # drop it and connect afresh
                self.client.disconnect(self.serial)
            self.client.connect(self.serial, timeout=min(3.0, cfg.call_timeout_s))
        except Exception as e:  # the next attempt reports the state
            log.debug("adb connect %s: %s", self.serial, e)

    async def shell_rc(self, command: str, what: str, *, idempotent: bool = True) -> tuple[str, int]:
        """Run a shell command; (output with stderr, exit status)."""
        raw = await self.call(f"shell:{command}; echo {_RC_MARKER.decode()}$?", what, idempotent=idempotent)
        i = raw.rfind(_RC_MARKER)
        if i < 0:
            raise DeviceError(f"cannot {what}: the shell's answer lacks its exit status: {raw[-200:]!r}")
        try:
            rc = int(raw[i + len(_RC_MARKER) :].strip() or b"-1")
        except ValueError:
            rc = -1
        return raw[:i].decode("utf-8", "replace"), rc

    async def shell(self, command: str, what: str, *, idempotent: bool = True) -> str:
        """Run a shell command that must succeed; its output, or DeviceError with the output."""
        out, rc = await self.shell_rc(command, what, idempotent=idempotent)
        if rc != 0:
            raise DeviceError(f"cannot {what}: `{command[:80]}` exited with {rc}: {out.strip()[:300]}")
        return out


def _check_ready(info: Any) -> None:
    """DeviceUnavailable saying what to do unless the listed phone is ready for commands."""
    if info.state == "unauthorized":
        raise DeviceUnavailable(
            f"phone {info.serial} has not authorized this computer: unlock it and accept the "
            "'Allow USB debugging?' prompt (tick 'Always allow'); if no prompt shows, revoke USB debugging "
            "authorizations in Developer options and reconnect"
        )
    if info.state == "offline":
        raise DeviceUnavailable(
            f"phone {info.serial} is offline: reconnect it (replug the cable, `adb reconnect`, or "
            "`adb disconnect` then `adb connect HOST:PORT` for network phones)"
        )
    if info.state != "device":
        raise DeviceUnavailable(f"phone {info.serial} is in state {info.state!r}, not ready for commands")


def _open_service(conn: Any, serial: str, service: str) -> None:
    """Switch an adb server connection to the phone, then open ``service``; _NotDelivered or _Refused if not."""
    import adbutils

    try:
        conn.send_command(f"host:transport:{serial}")
        conn.check_okay()
    except (adbutils.AdbError, OSError) as e:
        raise _NotDelivered(str(e) or type(e).__name__) from e
    try:
        conn.send_command(service)
        conn.check_okay()
    except adbutils.AdbError as e:
        message = str(e)
        if "closed" in message:
            raise _Refused(message) from e
        raise _NotDelivered(message) from e
    except OSError as e:
        raise _NotDelivered(str(e) or type(e).__name__) from e


def _read_to_end(sock: socket.socket, service: str, timeout: float) -> bytes:
    """Everything the phone writes on an open service until it closes it; DeviceTimeout on a silent phone."""
    sock.settimeout(timeout)
    buf = bytearray()
    chunk = bytearray(1 << 20)
    view = memoryview(chunk)
    while True:
        try:
            n = sock.recv_into(view)
        except socket.timeout as e:
            raise DeviceTimeout(
                f"the phone did not finish {service.split(':', 1)[-1][:60]!r} within {timeout} s "
                "(raise android.call_timeout_s if it is only slow)"
            ) from e
        except OSError as e:
            raise _Broken(str(e)) from e
        if not n:
            return bytes(buf)
        buf += view[:n]
