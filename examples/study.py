# %% [markdown]
# # A study from Python
#
# Plan a small sweep, run it and read what it stored, without the command line: what
# `branchpoint sweep study.yaml` does, as three calls. Run it as a script
# (`python examples/study.py`) or cell by cell (the `# %%` markers are Jupyter/VS Code cells;
# in a notebook, whose event loop is already running, write `await arun_study(plan, store)`
# instead of `run_study(plan)`).
#
# Offline by default: the target and the persona simulator are `oai:` models of the loopback
# OpenAI-compatible server (`branchpoint.gateway.testing.openai_server`, which echoes), started here.
# `BRANCHPOINT_EXAMPLE_API_BASE=http://HOST:PORT/v1` points them at another server instead, and
# `BRANCHPOINT_EXAMPLE_DIR` says where the manifest and the store go (default: a new temporary
# folder).

# %%
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from branchpoint import (
    LIBRARY,
    conversation_rows,
    judgment_rows,
    open_store,
    plan_study,
    run_costs,
    run_study,
    turn_rows,
)
from branchpoint.core.read import model_call_count

# a scenario of the library that ships with the package (no checkout needed)
SCENARIO = LIBRARY / "teen" / "teen-ah-rail-bridge-jump.yaml"

api_base = os.environ.get("BRANCHPOINT_EXAMPLE_API_BASE")
server = None
if not api_base:
    from branchpoint.gateway.testing.openai_server import ServerThread

    server = ServerThread(model="scripted:echo")
    api_base = server.start()
folder = Path(os.environ.get("BRANCHPOINT_EXAMPLE_DIR") or tempfile.mkdtemp(prefix="study-"))
folder.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## The manifest
# The same file `branchpoint sweep` reads (JSON is YAML): one scenario and its variants, two
# targets, one persona simulator, a heuristic judge that judges each target's conversations as
# soon as they are done (`when: live`).

# %%
manifest = folder / "study.yaml"
manifest.write_text(
    json.dumps(
        {
            "name": "example-study",
            "scenarios": {"paths": [str(SCENARIO)]},
            "targets": [
                {"spec": "oai:target-a", "params": {"api_base": api_base}},
                {"spec": "oai:target-b", "params": {"api_base": api_base}},
            ],
            "simulators": ["oai:persona"],
            "simulator_params": {"api_base": api_base},
            "judges": [{"spec": "heuristic", "rubrics": ["teen"], "when": "live"}],
            "max_exchanges": 2,
            "store": "results.db",
        },
        indent=2,
    ),
    encoding="utf-8",
)

# %% [markdown]
# ## The plan
# Cells (variant x target x condition x simulator x replicate), the ones already done, model
# calls, tokens, dollars (low / expected / high), wall time and the detectable differences.
# Planning writes nothing: a store that does not exist yet is not created.

# %%
plan = plan_study(manifest)
print("\n".join(plan.lines()))

# %% [markdown]
# ## The run
# Grows the cells not done yet and runs the judges. Running the same manifest again continues
# the sweep: the cells already done are skipped.

# %%
result = run_study(plan)
print(
    f"{result.sweep.conversations} conversations, {result.sweep.completed} completed; "
    f"{result.judging.rows} verdicts, {result.judging.errors} errors; ok: {result.ok}"
)

# %% [markdown]
# ## The results, through the read layer (`branchpoint.core.read`)

# %%
store = open_store(plan.store_url)
try:
    conversations = conversation_rows(store, [plan.sweep_id])
    turns = turn_rows(store, [plan.sweep_id], role=None)
    verdicts = judgment_rows(store, [plan.sweep_id])
    print(conversations.groupby(["target", "conversation_status"]).size().to_string())
    print(f"{len(turns)} turns, {model_call_count(store)} model calls, {len(verdicts)} verdicts")
    calls, usd = run_costs(store).get(plan.sweep_id, (0, 0.0))
    # None where a call has no price known: a loopback server's models have none
    print(f"the sweep's calls: {calls}, " + ("unpriced" if usd is None else f"${usd:.4f}"))
finally:
    store.close()
    if server is not None:
        server.stop()
