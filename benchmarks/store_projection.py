"""The store of the teen study at scale: 32,555 conversations x 10 exchanges, judged (issue 45).

    python benchmarks/store_projection.py [--exchanges 6]

Measures a real run of the teen library judged through the loopback server (what
``benchmarks/judge_cache_share.py`` does, whose figures it prints too) and scales the store's
bytes per conversation-exchange to the study; also what the judge calls would add with their
prompts stored whole, as before issue 45.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

if __name__ == "__main__":
    import judge_cache_share

    sys.argv.append("--project")
    judge_cache_share.main()
