"""Where the library that ships with branchpoint lives: its scenarios, prompt conditions and crisis
resources (``branchpoint/scenarios/library/``). Every layer that falls back on the bundled files takes the path
from here.
"""

from __future__ import annotations

from pathlib import Path

LIBRARY = Path(__file__).resolve().parent / "library"
