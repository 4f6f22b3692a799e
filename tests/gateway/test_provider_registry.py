"""The provider registry: built-in providers and plugins declare a ProviderKind; nothing else knows them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures.engine.helpers import HERE as FIX
from fixtures.engine.helpers import plugin_env, run_cli

from branchpoint.core.errors import UserError
from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.providers import registry
from branchpoint.gateway.specs import parse_spec

LAB_PLUGIN = '''
"""A lab's in-house model family, served under its own prefix: lab:NAME."""
from branchpoint.gateway.completion import Completion, GenParams, Message
from branchpoint.gateway.providers.base import ProviderKind

MADE: list[str] = []


class LabModels:
    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        return Completion(text=f"lab {model} here, tell me more", finish_reason="stop")

    async def aclose(self) -> None:
        return None


def create(model: str) -> LabModels:
    MADE.append(model)
    return LabModels()


PROVIDER = ProviderKind(
    prefix="lab",
    usage="lab:NAME",
    create=create,
    default_concurrency=3,
    limit_key=lambda model, params: "lab:one-gpu",  # every lab model shares one machine
)
'''


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A plugin module ``lab_plugin`` on sys.path, named in $BRANCHPOINT_PLUGINS; the registry's
    table is restored afterwards so that other tests never see its prefix."""
    (tmp_path / "lab_plugin.py").write_text(LAB_PLUGIN, encoding="utf-8")
    (tmp_path / "hf_thief.py").write_text(
        LAB_PLUGIN.replace('prefix="lab"', 'prefix="hf"'), encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "lab_plugin")
    monkeypatch.setattr(registry, "_modules", dict(registry._modules))
    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))
    for name in ("lab_plugin", "hf_thief"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_a_plugin_prefix_parses_and_is_served_with_its_declared_limits(plugin_dir: Path) -> None:
    spec = parse_spec("lab:tiny")
    assert (spec.kind, spec.model) == ("lab", "tiny")

    async def go() -> tuple[list[str], list[int], int]:
        gw = Gateway(cache=False)
        texts = []
        for name in ("tiny", "big", "tiny"):
            completion, _ = await gw.complete(
                f"lab:{name}", [Message(role="user", content="hi")], GenParams()
            )
            texts.append(completion.text)
        limits = [lim.limits.max_concurrency for lim in gw._limiters.values()]
        n = len(gw._providers)
        await gw.aclose()
        return texts, limits, n

    texts, limits, n_providers = asyncio.run(go())
    assert texts == [f"lab {m} here, tell me more" for m in ("tiny", "big", "tiny")]
    assert limits == [3]  # one limiter (the declared key), at the declared concurrency
    assert n_providers == 1  # one provider object per prefix, shared by its models
    assert sys.modules["lab_plugin"].MADE == ["tiny"]


def test_unknown_prefix_lists_registered_ones_plugins_included(plugin_dir: Path) -> None:
    with pytest.raises(UserError) as info:
        parse_spec("vllm:foo")
    msg = str(info.value)
    assert "\n" not in msg
    for usage in ("embedded", "hf:MODEL_ID_OR_PATH", "litellm:PROVIDER/MODEL", "lab:NAME"):
        assert usage in msg
    assert registry.prefixes()[-1] == "lab"


def test_a_plugin_cannot_take_a_built_in_prefix(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "hf_thief")
    with pytest.raises(UserError, match=r"hf_thief: provider prefix 'hf' is already declared by"):
        parse_spec("nosuch:model")
    assert parse_spec("hf:org/model").kind == "hf"
    assert registry.provider_kind("hf").create.__module__ == "branchpoint.gateway.providers.hf"


def test_a_plugin_that_cannot_be_imported_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "no_such_plugin_module")
    with pytest.raises(UserError, match=r"^\$BRANCHPOINT_PLUGINS: cannot import 'no_such_plugin"):
        parse_spec("nosuch:model")


def test_parsing_a_spec_imports_only_its_own_provider_module() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        from branchpoint.gateway.specs import parse_spec
        parse_spec("scripted:echo")
        parse_spec("oai:m")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("branchpoint.gateway.providers."))))
        print(json.dumps([m for m in ("torch", "transformers", "litellm", "aiohttp") if m in sys.modules]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    providers, heavy = (json.loads(line) for line in proc.stdout.splitlines()[-2:])
    assert (
        providers
        == [
            "branchpoint.gateway.providers.base",
            "branchpoint.gateway.providers.http1",  # oai's own HTTP client
            "branchpoint.gateway.providers.oai",
            "branchpoint.gateway.providers.proxied",  # oai's proxy route; aiohttp itself loads only when used
            "branchpoint.gateway.providers.registry",
            "branchpoint.gateway.providers.scripted",
        ]
    )
    assert heavy == []


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_a_run_on_the_command_line_targets_a_plugin_provider(tmp_path: Path) -> None:
    (tmp_path / "lab_plugin.py").write_text(LAB_PLUGIN, encoding="utf-8")
    env = plugin_env(0.0)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    env["BRANCHPOINT_PLUGINS"] = "engine_plugin,lab_plugin"
    db = tmp_path / "lab.db"
    proc = run_cli(
        "run",
        str(FIX / "on_event.yaml"),
        "--target",
        "lab:tiny",
        "--simulator",
        "scripted:persona",
        "--max-turns",
        "3",
        "--db",
        str(db),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    import sqlite3

    with sqlite3.connect(db) as con:
        replies = {r[0] for r in con.execute("select content from turns where role = 'assistant'")}
        targets = {r[0] for r in con.execute("select target from conversations")}
    assert targets == {"lab:tiny"}
    assert "lab tiny here, tell me more" in replies


def test_a_plugin_with_neither_provider_nor_register_is_refused(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from branchpoint.simulator.runner import load_plugins

    (plugin_dir / "idle_plugin.py").write_text('"""Declares nothing."""\n', encoding="utf-8")
    monkeypatch.delitem(sys.modules, "idle_plugin", raising=False)
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "lab_plugin,idle_plugin")
    with pytest.raises(UserError, match="'idle_plugin' has no register.gateway. function"):
        load_plugins(Gateway(cache=False))
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "lab_plugin")
    assert load_plugins(Gateway(cache=False)) == ["lab_plugin"]  # PROVIDER alone is enough


# ------------------------------------------------------------------ entry points (installed plugins)


def _install_plugin_distribution(folder: Path, entry_point: str) -> Path:
    """A tiny installed distribution, ``lab-models``: its module and a .dist-info whose
    entry_points.txt names it in ``branchpoint.providers``, as ``pip install`` leaves them."""
    folder.mkdir(exist_ok=True)
    (folder / "lab_plugin.py").write_text(LAB_PLUGIN, encoding="utf-8")
    info = folder / "lab_models-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lab-models\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\n{entry_point}\n", encoding="utf-8"
    )
    return folder


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The distribution on sys.path (importlib.metadata finds it there), no $BRANCHPOINT_PLUGINS;
    the registry's table and its entry-point cache are restored afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("BRANCHPOINT_PLUGINS", raising=False)
    monkeypatch.setattr(registry, "_modules", dict(registry._modules))
    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))
    monkeypatch.delitem(sys.modules, "lab_plugin", raising=False)
    registry.plugin_entry_points.cache_clear()
    yield tmp_path
    registry.plugin_entry_points.cache_clear()


@pytest.mark.parametrize("entry_point", ["lab = lab_plugin", "lab = lab_plugin:PROVIDER"])
def test_an_installed_entry_point_serves_its_prefix(installed: Path, entry_point: str) -> None:
    assert registry.find("lab") is None  # not installed yet
    registry.plugin_entry_points.cache_clear()
    _install_plugin_distribution(installed, entry_point)
    registry.plugin_entry_points.cache_clear()
    kind = registry.find("lab")
    assert kind is not None and kind.usage == "lab:NAME"
    assert "lab:NAME" in registry.usages()


def test_an_entry_point_whose_kind_has_another_prefix_is_one_line(installed: Path) -> None:
    _install_plugin_distribution(installed, "labs = lab_plugin:PROVIDER")
    with pytest.raises(
        UserError, match=r"^entry point labs = 'lab_plugin:PROVIDER' .*'lab'.*'labs'"
    ):
        registry.find("labs")


def test_a_broken_entry_point_is_one_line_naming_it(installed: Path) -> None:
    _install_plugin_distribution(installed, "lab = lab_plugin_missing")
    with pytest.raises(
        UserError,
        match=r"^entry point lab = 'lab_plugin_missing' \(group branchpoint.providers\): cannot load",
    ):
        registry.find("lab")


@pytest.mark.slow  # two command lines in real processes: over 2 s
def test_the_command_line_runs_and_judges_an_installed_plugins_prefix(tmp_path: Path) -> None:
    # in a subprocess, as a lab would: `pip install lab-models`, then use lab:... on the command line
    site = _install_plugin_distribution(tmp_path / "site", "lab = lab_plugin")
    env = plugin_env(0.0)  # its BRANCHPOINT_PLUGINS names the test's scripted persona only
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    assert "lab_plugin" not in env["BRANCHPOINT_PLUGINS"]
    db = tmp_path / "lab.db"
    proc = run_cli(
        "run", str(FIX / "on_event.yaml"), "--target", "lab:tiny", "--simulator",
        "scripted:persona", "--max-turns", "3", "--db", str(db), "--run-id", "lab-run",
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    import sqlite3

    with sqlite3.connect(db) as con:
        replies = {r[0] for r in con.execute("select content from turns where role = 'assistant'")}
        targets = {r[0] for r in con.execute("select target from conversations")}
    assert targets == {"lab:tiny"}
    assert "lab tiny here, tell me more" in replies
    # the plugin's model as a judge: its plain-text answer is not a verdict, so every unit is an
    # error (never a pass), and the call went to the plugin's model
    judged = run_cli(
        "judge", "lab-run", "--judge", "lab:judge", "--rubric", "teen", "--db", str(db), env=env
    )
    assert judged.returncode in (0, 1), judged.stderr
    with sqlite3.connect(db) as con:
        verdicts = {
            r[0] for r in con.execute("select verdict from judgments where judge = 'lab:judge'")
        }
    assert verdicts == {"error"}, verdicts
