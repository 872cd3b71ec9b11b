"""The kiosk's ``[kiosk]`` config section."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KioskConfig:
    terminal: str = ""
    """Which kiosk terminal to drive (``--device kiosk:TERMINAL``); empty = the lobby's."""
    width: int = 64
    """Screen width in pixels."""
    height: int = 48
    """Screen height in pixels."""

    def __post_init__(self) -> None:
        if self.width < 1 or self.height < 1:
            raise ValueError(f"width and height must be at least 1, got {self.width}x{self.height}")
