"""Reproducibility kit for deep-learning framework benchmarks.

This module must stay import-light: the harness imports ``kit.harness`` inside
framework containers, where none of the host-side dependencies exist.
"""

from __future__ import annotations

__version__ = "0.1.0"
