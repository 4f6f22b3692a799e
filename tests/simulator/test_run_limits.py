"""``--concurrency N`` puts N conversations and up to N calls in flight; ``--limit`` and
``--limits FILE`` cap a provider below that. Counted by the loopback server (real HTTP)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.engine.helpers import run_cli

from branchpoint.core.errors import UserError
from branchpoint.gateway.limits import ProviderLimits, load_limits, parse_limit
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.runner import RunConfig, run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine"


@pytest.fixture
def slow_server() -> Iterator[ServerThread]:
    server = ServerThread(model="scripted:echo", delay_s=0.3)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _peak(server: ServerThread, tmp_path: Path, concurrency: int, **limits: ProviderLimits) -> int:
    config = RunConfig(
        scenarios=[str(FIX / "at_turn.yaml")],
        targets=["oai:echo"],
        target_params={"api_base": server.base_url},
        simulators=["oai:echo"],
        simulator_params={"api_base": server.base_url},
        replicates=6,
        max_turns=2,
        fork="independent",
        concurrency=concurrency,
        limits=limits,
        db=str(tmp_path / f"peak{concurrency}.db"),
    )
    asyncio.run(run(config))
    assert server.server is not None
    return server.server.peak_in_flight


def test_concurrency_puts_that_many_calls_in_flight(
    slow_server: ServerThread, tmp_path: Path
) -> None:
    # 6 replicates x 2 arms, independent: 12 conversations whose first calls all go out together;
    # before, the oai provider's own default (64) or a low one capped them
    assert _peak(slow_server, tmp_path, 12) == 12


@pytest.mark.slow
def test_a_limit_caps_the_provider_below_the_concurrency(
    slow_server: ServerThread, tmp_path: Path
) -> None:
    key = f"oai:{slow_server.base_url}"
    assert _peak(slow_server, tmp_path, 12, **{key: ProviderLimits(max_concurrency=3)}) == 3


def test_limit_strings_and_files(tmp_path: Path) -> None:
    key, lim = parse_limit("litellm:openai,max_concurrency=5,rpm=600,tpm=90000")
    assert key == "litellm:openai" and lim == ProviderLimits(max_concurrency=5, rpm=600, tpm=90000)
    with pytest.raises(ValueError, match="expected one of max_concurrency, rpm, tpm"):
        parse_limit("oai:x,calls=5")
    with pytest.raises(ValueError, match="max_concurrency"):
        parse_limit("oai:x,max_concurrency=0")
    good = tmp_path / "limits.yaml"
    good.write_text('limits:\n  "*": {max_concurrency: 7}\n  litellm: {rpm: 100}\n')
    loaded = load_limits(good, ["litellm,max_concurrency=2"])
    assert loaded["*"].max_concurrency == 7 and loaded["litellm"].max_concurrency == 2
    assert loaded["litellm"].rpm is None  # a --limit replaces the file's entry for its key
    bad = tmp_path / "bad.yaml"
    bad.write_text("limits:\n  oai:\n    max_concurrency: many\n")
    with pytest.raises(UserError) as info:
        load_limits(bad)
    line = str(info.value)
    assert line.startswith(f"{bad}:3:") and "max_concurrency" in line and "\n" not in line


def test_the_command_line_reports_a_bad_limits_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("limits:\n  oai:\n    tpm: -4\n")
    done = run_cli(
        "run", str(FIX / "at_turn.yaml"), "--db", str(tmp_path / "x.db"), "--limits", str(bad)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and f"{bad}:3:" in errors[0] and "tpm" in errors[0]
    assert "Traceback" not in done.stderr
    bad_flag = run_cli(
        "run", str(FIX / "at_turn.yaml"), "--db", str(tmp_path / "y.db"), "--limit", "oai"
    )
    assert bad_flag.returncode == 2 and "--limit" in bad_flag.stderr
