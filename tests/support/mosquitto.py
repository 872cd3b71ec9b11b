"""Test infrastructure: a private mosquitto broker on a free loopback port, and a TCP proxy to cut one client off.

``Mosquitto(tmp_path).start()`` writes a config (``listener PORT 127.0.0.1``, persistence in ``tmp_path`` so QoS-1
sessions and retained messages survive a restart, anonymous clients allowed, no limit on queued messages), starts
``mosquitto -c`` (in a process group of its own: ``tests.support.procs``) and waits until the port answers;
``stop()`` ends it (SIGTERM, so it writes its persistence file, as a clean broker stop does), ``start()`` again brings
it back on the same port. With ``secure=True`` the broker listens with TLS only (a CA and a server certificate for
127.0.0.1 made here with ``openssl``), refuses
anonymous clients, checks a password file (``mosquitto_passwd -b``) and applies the ACL of docs/fleet.md: the
learner reads samples, episodes and statuses and writes the announcement; an actor writes only its own samples,
episodes and status and reads only the announcement.

``Mosquitto(tmp_path, conf=TEXT, port=PORT)`` runs a configuration written elsewhere instead (docs/fleet.md's,
listening on ``PORT``: tests/agent/fleet/test_two_machines.py).

``TcpProxy(target_port)`` forwards a loopback port to the broker; ``cut()`` closes every connection and refuses new
ones (an actor whose network went away), ``heal()`` lets them through again. Nothing here talks to any address but
127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from tests.support.installed import need_program
from tests.support import procs

ACL = """\
# the learner: reads what actors send, writes the announcement
user learner
topic read {prefix}/samples/+
topic read {prefix}/episodes/+
topic readwrite {prefix}/status/+
topic readwrite {prefix}/policy
topic readwrite {prefix}/learner/+

# every actor (its user name is its actor name): only its own topics, and the announcement
pattern write {prefix}/samples/%u
pattern write {prefix}/episodes/%u
pattern readwrite {prefix}/status/%u
pattern read {prefix}/policy
pattern read {prefix}/learner/+
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mosquitto:
    """A private broker (see the module docstring)."""

    def __init__(self, folder: Path, *, secure: bool = False, users: dict[str, str] | None = None,
                 prefix: str = "handeye/test", port: int = 0, conf: str = "") -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.secure, self.users, self.prefix = secure, users or {}, prefix
        need_program("mosquitto", "mosquitto")
        if secure:
            need_program("mosquitto_passwd", "mosquitto mosquitto-clients")
            need_program("openssl", "openssl")
        self.proc: subprocess.Popen[bytes] | None = None
        self.ca = self.folder / "ca.crt"
        self.config = self.folder / "mosquitto.conf"
        if conf:
            self.config.write_text(conf)
        else:
            self._write_config()

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.secure else 'mqtt'}://127.0.0.1:{self.port}/{self.prefix}"

    def _write_config(self) -> None:
        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        lines = ["user root"] if os.geteuid() == 0 else []  # as root, mosquitto would switch to a user that
        # cannot read the test's private folder
        lines += [f"listener {self.port} 127.0.0.1", "persistence true", f"persistence_location {data}/",
                 "max_queued_messages 0", "max_inflight_messages 64", f"log_dest file {self.folder}/mosquitto.log",
                 "log_type error", "log_type warning", "log_type notice"]
        if self.secure:
            self._make_certs()
            passwd = self.folder / "passwd"
            passwd.write_text("")
            for user, password in self.users.items():
                procs.run(["mosquitto_passwd", "-b", str(passwd), user, password], check=True,
                          capture_output=True, timeout=60)
            acl = self.folder / "acl"
            acl.write_text(ACL.format(prefix=self.prefix))
            lines += ["allow_anonymous false", f"password_file {passwd}", f"acl_file {acl}",
                      f"cafile {self.ca}", f"certfile {self.folder / 'server.crt'}",
                      f"keyfile {self.folder / 'server.key'}", "tls_version tlsv1.2"]
        else:
            lines.append("allow_anonymous true")
        self.config.write_text("\n".join(lines) + "\n")

    def _make_certs(self) -> None:
        f = self.folder
        run = lambda *a: procs.run(a, check=True, capture_output=True, cwd=f, timeout=60)  # noqa: E731
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", "ca.key",
            "-out", "ca.crt", "-subj", "/CN=handeye test CA", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1")
        (f / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
        run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
        os.chmod(f / "server.key", 0o644)  # mosquitto may drop privileges; the folder is the test's own

    def start(self, timeout: float = 10.0) -> Mosquitto:
        self.proc = procs.start(["mosquitto", "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: "
                                   f"{self.proc.stderr.read().decode(errors='replace') if self.proc.stderr else ''}"
                                   f"{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mosquitto did not listen on {self.port} within {timeout} s: {self.log()}")

    def stop(self) -> None:
        """SIGTERM to our broker (it saves its persistence file), SIGKILL after 10 s, and wait for it."""
        if self.proc is not None:
            procs.stop(self.proc, grace=10)
        self.proc = None

    def log(self) -> str:
        path = self.folder / "mosquitto.log"
        return path.read_text(errors="replace")[-3000:] if path.is_file() else ""

    def __enter__(self) -> Mosquitto:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TcpProxy:
    """A loopback TCP proxy in a thread of its own (see the module docstring)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.open = True
        self.silent = False
        """While cut silently, bytes are swallowed and connections left hanging (a cable pulled: no reset)."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="tcp-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            if self.silent:  # nothing answers: the client's connect times out
                while await reader.read(1 << 16):
                    pass
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(1 << 16):
                    if not self.open and self.silent:
                        continue  # swallowed
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def start(self) -> TcpProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    def cut(self, *, silent: bool = False) -> None:
        """Cut every connection through the proxy: reset them and refuse new ones, or with ``silent`` swallow every
        byte from now on and answer nothing (the peers notice only by their keepalive)."""
        def close_all() -> None:
            self.open, self.silent = False, silent
            if not silent:
                for w in list(self._writers):
                    w.transport.abort()
        self._loop.call_soon_threadsafe(close_all)

    def heal(self) -> None:
        """Let new connections through again (connections cut silently stay dead: their peers reconnect)."""
        def reopen() -> None:
            for w in list(self._writers):
                w.transport.abort()
            self.open, self.silent = True, False
        self._loop.call_soon_threadsafe(reopen)

    def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
