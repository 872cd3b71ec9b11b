"""Web addresses as the browser reads them, for the guard's URL rules (agent/guard.py, ``UrlGuard``).

A guard that splits a URL its own way judges a different address than the one the browser opens:
``http://127.0.0.1:8080\\@localhost/`` is host ``localhost`` to Python's ``urlsplit`` and ``127.0.0.1`` to Chromium,
which reads the backslash as a slash; ``http://2130706433/``, ``http://0x7f.1/`` and ``http://%31%32%37.0.0.1/`` are
all 127.0.0.1. ``parse_address`` uses the WHATWG URL Standard, the parser browsers follow, through Ada (the
``ada-url`` package; Node.js's parser): tabs and newlines removed, backslashes read as slashes in http(s), user info
set apart from the host, the host percent-decoded, mapped through IDNA (UTS #46) to its ASCII form, and IPv4
numbers in any form (decimal, octal, hex, fewer than four parts) written as four decimals. The test
``tests/agent/test_guard_reads.py`` opens such addresses in Chromium and compares where it lands with the host
judged here.

``forbidden_host`` says whether a host is link-local or a cloud metadata service, which ``open_url`` never reaches
unless ``guard.allow_link_local`` says so: a model that can open ``http://169.254.169.254/`` on a cloud machine
reads the machine's credentials.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

METADATA_HOSTS = ("metadata.google.internal", "metadata.goog", "metadata", "instance-data")
"""Names of cloud metadata services (Google Cloud's, and the short names Google Cloud and AWS resolve); their
subdomains count too."""

METADATA_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "169.254.169.254/32",  # AWS, Azure, Google Cloud, Oracle and OpenStack's metadata service
    "169.254.0.0/16",      # IPv4 link-local
    "fe80::/10",           # IPv6 link-local
    "fd00:ec2::254/128",   # AWS's metadata service over IPv6
    "100.100.100.200/32",  # Alibaba Cloud's metadata service
    "168.63.129.16/32",    # Azure's host endpoint (WireServer)
))
"""Addresses ``open_url`` refuses by default (``guard.allow_link_local``)."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")


@dataclass(frozen=True, slots=True)
class WebAddress:
    """A URL as the browser reads it."""

    scheme: str
    """Lower-case, without the colon."""
    host: str
    """As the browser resolves it: lower-case ASCII (IDNA), an IPv4 address in four decimals, an IPv6 address without
    brackets; empty for schemes without a host (``data:``, ``javascript:``, ``about:``)."""
    href: str
    """The whole URL as the browser writes it."""


def parse_address(text: str) -> WebAddress:
    """``text`` read as the WHATWG URL Standard reads it (see the module docstring); ValueError when a browser would
    not open it as an address at all (no scheme, a malformed host)."""
    import ada_url

    try:
        url = ada_url.URL(text)
    except ValueError:
        raise ValueError(f"{text[:200]!r} is not an absolute URL a browser would open (write it with its scheme, "
                         "e.g. https://example.com/)") from None
    host = url.hostname or ""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return WebAddress(scheme=url.protocol.rstrip(":").lower(), host=host.lower(), href=url.href)


def forbidden_host(host: str) -> str | None:
    """Why ``host`` (as ``parse_address`` gives it) is off limits by default, or None: link-local addresses
    (IPv4-mapped, NAT64 and 6to4 forms of them too) and cloud metadata services."""
    name = host.rstrip(".").lower()
    if any(name == m or name.endswith("." + m) for m in METADATA_HOSTS):
        return f"{host} is a cloud metadata service"
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    for candidate in _embedded(address):
        network = next((n for n in METADATA_NETWORKS if candidate.version == n.version and candidate in n), None)
        if network is not None:
            kind = "link-local" if network.prefixlen in (10, 16) else "a cloud metadata service"
            return f"{host} is {kind} ({network})"
    return None


def _embedded(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address |
                                                                                  ipaddress.IPv6Address]:
    """The address and the IPv4 addresses an IPv6 address carries (mapped, 6to4, NAT64, IPv4-compatible)."""
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        for inner in (address.ipv4_mapped, address.sixtofour):
            if inner is not None:
                found.append(inner)
        if address in _NAT64 or (address in _COMPATIBLE and int(address) > 0xFFFF):
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found
