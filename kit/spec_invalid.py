"""The one exception spec validation raises internally, with a key path relative to the spec root.

Its own module so that the parts of the spec kept in modules of their own (kit.claim_spec) raise the
same error the loader turns into a SpecError naming the file and the key path, without importing the
loader (which imports them).
"""

from __future__ import annotations

import dataclasses


class Invalid(Exception):
    """Raised inside validation with a key path relative to the spec root."""

    def __init__(self, path: str, expected: str, got: object = dataclasses.MISSING, fix: str | None = None) -> None:
        self.path, self.expected, self.got, self.fix = path, expected, got, fix
        super().__init__(path)
