"""Small helpers for reading sysfs attributes (hwmon, thermal zones, powercap).

Sensors are read every 100 ms, so a collector opens each attribute once and
re-reads it with ``pread`` at offset 0, which makes sysfs regenerate the value
(and, on a plain file in a test tree, returns what the test last wrote).
"""

from __future__ import annotations

import os
from pathlib import Path


def read_text(path: Path) -> str | None:
    """The stripped contents of a small attribute, or None when it is absent or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """An integer attribute, or None when absent, unreadable or not a number."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


class Attr:
    """An attribute kept open between readings; ``value()`` re-reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def open(self) -> None:
        """Open for reading; raises ``OSError`` (e.g. ``PermissionError``) as it comes."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)

    def value(self) -> int:
        """The attribute as an integer; raises ``OSError`` or ``ValueError`` on a bad read."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        raw = os.pread(self._fd, 64, 0)
        return int(raw.strip())

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None


def natural_key(name: str) -> tuple[object, ...]:
    """Sort key that orders 'hwmon10' after 'hwmon2' and 'temp10_input' after 'temp2_input'."""
    out: list[object] = []
    num = ""
    text = ""
    for ch in name:
        if ch.isdigit():
            if text:
                out.append(text)
                text = ""
            num += ch
        else:
            if num:
                out.append(int(num))
                num = ""
            text += ch
    if num:
        out.append(int(num))
    if text:
        out.append(text)
    # mixed int/str comparisons never happen for names of the same shape; guard anyway
    return tuple((0, x) if isinstance(x, int) else (1, x) for x in out)


def listdir(path: Path) -> list[str]:
    """Entries of a directory in natural order; [] when it does not exist."""
    try:
        return sorted(os.listdir(path), key=natural_key)
    except OSError:
        return []
