"""Shared test setup: the package and the repo root importable, fixtures located."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

for path in (ROOT, ROOT / "handler"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
