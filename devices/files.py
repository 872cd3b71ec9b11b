"""Files people hand to handeye (task files, trajectories, datasets), read as plain data inside their folder.

Three rules, each a ``ValueError`` saying what was wrong and what to do (callers turn it into their own error):

- ``read_regular``: only a regular file is read, and at most ``max_bytes`` of it. The file is opened with
  ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor before a byte is read, so a FIFO never blocks
  the reader (``open`` of a FIFO without a writer would wait forever), a device such as ``/dev/zero`` is refused
  instead of read without end, and a file swapped between a check and the open cannot slip through. A file that
  grows past the bound while it is read is refused too (one byte more than the bound is asked for).
- ``confined``: a path named inside a file (a step's ``frame_path``, a dataset's image) is relative, has no
  ``..``, and still lies under its folder once every symlink is resolved.
- ``header_size`` / ``check_image``: an encoded image's width and height come from its header (PNG, JPEG, GIF,
  BMP, WebP), so a 1 MiB PNG declaring 20000x20000 pixels is refused before decoding would take 1.2 GB per copy
  (``MAX_IMAGE_PIXELS``).
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path, PurePosixPath

__all__ = ["MAX_IMAGE_BYTES", "MAX_IMAGE_PIXELS", "check_image", "confined", "header_size", "read_regular"]

MAX_IMAGE_BYTES = 64 * 1024 * 1024
"""The largest image file read (a 4K PNG screenshot is a few MB)."""
MAX_IMAGE_PIXELS = 64 * 1024 * 1024
"""The most pixels an image from disk may have (67 million: an 8K screen has 33 million; the largest
ScreenSpot-Pro screenshot about 20 million). Decoded RGB it takes 201 MB."""


def read_regular(path: str | Path, max_bytes: int, what: str = "file", *, head: bool = False) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``max_bytes``; ``ValueError`` when it is not a
    regular file (a FIFO, a device, a socket, a folder) or is larger; ``OSError`` as from ``open`` otherwise.
    With ``head``, the first ``max_bytes`` of a regular file of any size."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file ({kind_of(info.st_mode)}); a {what} must be a plain "
                             "file: replace it with one")
        if head:
            os.set_blocking(fd, True)
            return os.read(fd, max_bytes)
        if info.st_size > max_bytes:
            raise ValueError(f"{path} is {info.st_size:,} bytes, more than {max_bytes:,} a {what} may have: is it "
                             "the right file?")
        os.set_blocking(fd, True)
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"{path} grew past {max_bytes:,} bytes while it was read; a {what} must not change while "
                         "handeye reads it")
    return data


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def confined(root: str | Path, relative: str, what: str = "path") -> Path:
    """``root / relative`` resolved, when ``relative`` is a relative path without ``..`` (``\\`` read as ``/``)
    that stays under ``root`` after symlinks are resolved; ``ValueError`` saying which rule it breaks otherwise."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise ValueError(f"{what} {relative!r} is not a file name")
    rel = PurePosixPath(relative.replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or Path(relative).is_absolute():
        raise ValueError(f"{what} {relative!r} is absolute or leaves its folder {root}; it must be a path relative "
                         "to the folder, without '..'")
    base = Path(root).resolve()
    target = (base / rel).resolve()
    if not target.is_relative_to(base):
        raise ValueError(f"{what} {relative!r} leads to {target} through a symlink, outside its folder {base}")
    return target


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of a PNG, JPEG, GIF, BMP or WebP image; None for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:2] == b"BM" and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return abs(width), abs(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return webp_size(data)
    if data[:2] == b"\xff\xd8":
        return jpeg_size(data)
    return None


def webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The size a JPEG's first frame header (SOF0-SOF15, not DHT/JPG/DAC) declares."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if pos + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[pos + 5:pos + 9])
            return width, height
        if length < 2:
            return None
        pos += 2 + length
    return None


def check_image(data: bytes, what: str = "image", max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """The image's (width, height) when its header is one ``header_size`` reads and it has at most ``max_pixels``
    pixels; ``ValueError`` saying which otherwise (nothing is decoded)."""
    size = header_size(data)
    if size is None:
        raise ValueError(f"{what} ({len(data):,} bytes) is not a PNG, JPEG, GIF, BMP or WebP image")
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"{what} declares {width}x{height} pixels")
    if width * height > max_pixels:
        raise ValueError(f"{what} declares {width}x{height} pixels, more than {max_pixels:,} (MAX_IMAGE_PIXELS): "
                         "decoding it would take "
                         f"{width * height * 3 / 1e9:.1f} GB; scale it down first")
    return width, height
