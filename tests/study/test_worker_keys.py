"""Where a Ray worker reads its API keys (``branchpoint.study.worker_keys``): its environment first, else the
manifest's ``execution.secrets_file`` on its node; one line for each key found nowhere, a secrets
file open to group or others refused like ssh refuses such a key. No Ray here: the worker's side
as a function; tests/study/test_ray_sweep.py and test_ray_keys.py run it on workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from branchpoint.core.errors import UserError
from branchpoint.study.manifest import ManifestError, load_manifest
from branchpoint.study.worker_keys import read_secrets_file, resolve_keys, worker_key_needs

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
KEY = "sk-fake-worker-0123456789abcdef"
NODE = "node-a (10.0.0.7)"


def _secrets(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "keys.env"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_the_environment_wins_and_the_file_is_read_only_for_what_it_lacks(tmp_path: Path) -> None:
    path = _secrets(
        tmp_path, f"# keys of this node\nexport BOT_KEY='{KEY}'\n\nOTHER_KEY = \"o-1\"\n"
    )
    needs = [("BOT_KEY", "targets[0]"), ("OTHER_KEY", "targets[1]")]
    assert resolve_keys(needs, str(path), NODE, {"OTHER_KEY": "from-env"}) == {
        "BOT_KEY": KEY,
        "OTHER_KEY": "from-env",
    }
    # every key in the environment: the file is not even opened (a broken one is no matter)
    path.chmod(0o644)
    assert resolve_keys(needs, str(path), NODE, {"BOT_KEY": "a", "OTHER_KEY": "b"}) == {
        "BOT_KEY": "a",
        "OTHER_KEY": "b",
    }


def test_a_key_found_nowhere_is_one_line_naming_it_its_role_the_node_and_where_it_looked(
    tmp_path: Path,
) -> None:
    path = _secrets(tmp_path, "SOME_OTHER=x\n")
    needs = [("BOT_KEY", "targets[0]"), ("SECOND_KEY", "targets[2]"), ("HERE", "targets[3]")]
    with pytest.raises(UserError) as caught:
        resolve_keys(needs, str(path), NODE, {"HERE": "v"})
    assert str(caught.value).splitlines() == [
        f"targets[0].key_env: $BOT_KEY is not set on Ray node {NODE} (looked in the worker's "
        f"environment and {path}; expected the key there)",
        f"targets[2].key_env: $SECOND_KEY is not set on Ray node {NODE} (looked in the worker's "
        f"environment and {path}; expected the key there)",
    ]
    with pytest.raises(UserError) as caught:
        resolve_keys(needs[:1], None, NODE, {})
    assert str(caught.value) == (
        f"targets[0].key_env: $BOT_KEY is not set on Ray node {NODE} (looked in the worker's "
        "environment; no execution.secrets_file is set; expected the key there)"
    )


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644])
def test_a_secrets_file_open_to_group_or_others_is_refused_in_one_line(
    tmp_path: Path, mode: int
) -> None:
    path = _secrets(tmp_path, f"BOT_KEY={KEY}\n", mode)
    with pytest.raises(UserError) as caught:
        read_secrets_file(path, NODE)
    message = str(caught.value)
    assert message == (
        f"execution.secrets_file: {path} on Ray node {NODE}: open to group or others "
        f"(mode {mode:04o}; expected chmod 600 {path}, readable by its owner only)"
    )
    assert KEY not in message


def test_a_malformed_or_missing_secrets_file_is_one_line_that_never_shows_its_text(
    tmp_path: Path,
) -> None:
    path = _secrets(tmp_path, f"BOT_KEY={KEY}\n{KEY}\n")
    with pytest.raises(UserError) as caught:
        read_secrets_file(path, NODE)
    assert str(caught.value) == (
        f"execution.secrets_file: {path} on Ray node {NODE}: line 2: expected NAME=value"
    )
    gone = tmp_path / "gone.env"
    with pytest.raises(UserError, match=r"gone.env on Ray node .*: no such file \(expected"):
        resolve_keys([("BOT_KEY", "targets[0]")], str(gone), NODE, {})


def _manifest(tmp_path: Path, execution: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(
        f"""scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:bot-a
    params: {{api_base: "http://127.0.0.1:9/v1"}}
    key_env: BOT_KEY
  - oai:bot-b
  - spec: oai:bot-c
    params: {{api_base: "http://127.0.0.1:9/v1"}}
    key_env: C_KEY
simulators: [scripted:echo]
execution: {execution}
""",
        encoding="utf-8",
    )
    return path


def test_the_manifest_names_a_secrets_file_for_ray_and_the_workers_get_names_only(
    tmp_path: Path,
) -> None:
    manifest = load_manifest(
        _manifest(tmp_path, "{mode: ray, secrets_file: /etc/branchpoint/keys.env}")
    )
    assert manifest.execution.secrets_file == "/etc/branchpoint/keys.env"
    assert worker_key_needs(manifest) == [("BOT_KEY", "targets[0]"), ("C_KEY", "targets[2]")]


def test_a_relative_secrets_file_or_one_on_a_local_sweep_is_a_positioned_line(
    tmp_path: Path,
) -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(_manifest(tmp_path, "{mode: ray, secrets_file: keys.env}"))
    assert [str(e) for e in caught.value.errors] == [
        f"{tmp_path / 'study.yaml'}:11:38: execution.secrets_file: 'keys.env' is not an "
        "absolute path (expected the file's path on every worker node, e.g. "
        "/etc/branchpoint/keys.env or ~/.config/branchpoint/keys.env)"
    ]
    with pytest.raises(ManifestError) as caught:
        load_manifest(_manifest(tmp_path, "{secrets_file: /etc/keys.env}"))
    (error,) = caught.value.errors
    assert str(error).startswith(f"{tmp_path / 'study.yaml'}:11:")
    assert str(error).endswith(
        "execution.secrets_file: only Ray workers read a secrets file (expected mode: ray, or "
        "no secrets_file: a local sweep reads keys from its own environment)"
    )
