"""``python3 -m kit.doctor torch-index|driver-check`` (kit.doctor.setup_cli)."""

from __future__ import annotations

import sys

from kit.doctor.setup_cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
