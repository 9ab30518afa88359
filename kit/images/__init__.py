"""Pinned framework images: the matrix, locks with hashes, recipes, builds and verification.

Submodules are imported on use: ``kit.images.matrix`` and ``kit.images.lock``
need only the standard library; ``build`` and ``verify`` need the docker SDK
and an engine.
"""

from __future__ import annotations
