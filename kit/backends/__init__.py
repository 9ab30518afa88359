"""Backend registry: name -> class path, imported on use (docker SDK only when asked)."""

from __future__ import annotations

import importlib
from typing import Any

from kit.backends.base import Backend
from kit.errors import BackendError

BACKENDS: dict[str, str] = {
    "local": "kit.backends.local:LocalBackend",
    "docker": "kit.backends.docker:DockerBackend",
    "apptainer": "kit.backends.apptainer:ApptainerBackend",
}


def backend_class(name: str) -> type[Backend]:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}", fix=f"use one of: {', '.join(BACKENDS)}")
    mod, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(mod), cls)


def make_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend; constructors do no work (probing is ``available()``)."""
    return backend_class(name)(**options)
