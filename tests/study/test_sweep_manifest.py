"""The sweep manifest: each malformed manifest yields exactly its one-line positioned error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchpoint.study import Manifest, ManifestError, load_manifest, manifest_json_schema
from branchpoint.study.manifest import scenario_paths, sweep_id_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BAD = FIXTURES / "bad_manifests"
REPO = Path(__file__).resolve().parents[2]

# file -> the whole error text after "PATH:" (one line each; exactly these, nothing more).
EXPECTED: dict[str, str] = {
    "alias_bomb.yaml": "6:8: f[0]: alias *e: aliases copy 141148 values so far (expected at most 100000 per file)",
    "batch_judge_no_api.yaml": "7:12: judges[0].batch: judge litellm:anthropic/claude-3-5-haiku-20241022 has no batch API here (batch judging serves oai:MODEL and litellm:openai/MODEL judges); judge it without batch: true",
    "batch_judge_with_budget.yaml": "8:12: judges[0].batch: batch judging cannot be bounded by a budget yet (expected batch: false, or no budget)",
    "bad_execution.yaml": "4:19: execution.mode: 'cluster' is not allowed (expected 'local' or 'ray')",
    "bad_fork.yaml": "4:7: fork: 'sometimes' is not allowed (expected 'shared' or 'independent')",
    "bad_judge_when.yaml": "7:11: judges[0].when: 'during' is not allowed (expected 'live' or 'after')",
    "bad_key_env.yaml": "5:14: targets[0].key_env: 'sk-abc123' is not an environment variable name (expected the NAME of the variable holding the key, e.g. OPENAI_API_KEY)",
    "bad_limits.yaml": "5:25: targets[0].limits.in_flight: 0 is too small (expected a whole number >= 1)",
    "bad_spec.yaml": "4:11: targets[0].spec: unknown model spec 'gpt4'; expected one of: embedded, hf:MODEL_ID_OR_PATH, litellm:PROVIDER/MODEL, oai:MODEL (with api_base), scripted:NAME",
    "duplicate_target.yaml": "6:11: targets[2].spec: target 'scripted:bot' is listed twice (expected each once; first is targets[0])",
    "empty.yaml": "1:1: <file>: file is empty (expected a YAML mapping)",
    "judge_no_rubrics.yaml": "6:5: judges[0].rubrics: has 0 entries (expected at least 1)",
    "key_in_params.yaml": "5:41: targets[0].params.api_key: a key does not belong in the manifest (expected key_env: the NAME of the environment variable holding it)",
    "max_exchanges_text.yaml": "4:16: max_exchanges: got 'many' (expected a whole number from 1 to 200)",
    "missing_scenarios.yaml": "1:1: scenarios: required field is missing (expected a mapping with any of paths, globs, variants, exclude_variants)",
    "negative_budget.yaml": "4:21: budget.usd_total: -5 is too small (expected a number > 0)",
    "no_scenario_source.yaml": "1:1: scenarios.paths: no scenarios named (expected paths or globs)",
    "no_targets.yaml": "3:1: targets: has 0 entries (expected at least 1)",
    "not_a_mapping.yaml": "1:1: <document>: the document is a list (expected a mapping of manifest keys)",
    "simulator_key_in_manifest.yaml": "6:58: simulators[0].params.api_key: a key does not belong in the manifest (expected key_env: the NAME of the environment variable holding it)",
    "simulator_price_no_spec.yaml": "5:5: simulators[0].spec: required field is missing (expected non-empty text)",
    "simulator_unknown_field.yaml": "5:30: simulators[0].prise: unknown key 'prise' (did you mean 'price'?)",
    "python_tag.yaml": "3:11: targets[0]: YAML tag !!python/object:os.system is not allowed (expected plain values: text, numbers, lists, mappings)",
    "unknown_condition.yaml": "4:20: conditions[1]: unknown condition 'teen_awre' (expected one of: none, teen_aware)",
    "unknown_key.yaml": "4:1: replicate: unknown key 'replicate' (did you mean 'replicates'?)",
    "zero_replicates.yaml": "4:13: replicates: 0 is too small (expected a whole number from 1 to 1000)",
}


def test_at_least_ten_bad_manifests_all_covered() -> None:
    files = {p.name for p in BAD.glob("*.yaml")}
    assert len(files) >= 10
    assert files == set(EXPECTED), "every bad manifest needs its expected error in EXPECTED"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_manifest_error_exact(name: str) -> None:
    path = BAD / name
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}:{EXPECTED[name]}"
    assert len(info.value.errors) == 1


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(
        "scenarios: {paths: [x]}\ntargets: [scripted:bot]\nreplicates: 0\nfork: both\n",
        encoding="utf-8",
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    # the schema's errors and the names' (no scenario file x) in one report
    assert [(e.line, e.field) for e in info.value.errors] == [
        (1, "scenarios.paths[0]"),
        (3, "replicates"),
        (4, "fork"),
    ]


def test_cross_item_problems_beside_other_mistakes_are_reported_in_the_same_pass(
    tmp_path: Path,
) -> None:
    """A duplicate target beside a misspelt one, and a batch judge under a budget beside any
    other mistake, were left to a second and third pass: pydantic runs checks across items only
    once every item is valid (issue 44, item 6: a manifest of 8 problems took 3 passes)."""
    library = REPO / "branchpoint" / "scenarios" / "library" / "teen"
    path = tmp_path / "ten.yaml"
    path.write_text(
        f"""scenarios:
  paths: [{library}, /nonexistent/x.yaml]
targets:
  - scripted:bot
  - spec: scripted:bot
  - spec: nonsense-spec
conditions: [none, teen_awre]
replicates: 0
budget: {{usd_total: 5}}
colour: blue
judges:
  - spec: litellm:openai/gpt-4o-mini
    rubrics: [teen, tee]
    batch: true
simulators:
  - price: {{input_per_mtok: 1, output_per_mtok: 2}}
execution: {{mode: cluster}}
""",
        encoding="utf-8",
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert [e.field for e in info.value.errors] == [
        "scenarios.paths[1]",
        "targets[1].spec",
        "targets[2].spec",
        "conditions[1]",
        "replicates",
        "colour",
        "judges[0].rubrics[1]",
        "judges[0].batch",
        "simulators[0].spec",
        "execution.mode",
    ]


def test_full_manifest_loads_with_defaults_and_short_targets(tmp_path: Path) -> None:
    path = tmp_path / "Teen Study.yaml"
    path.write_text(
        """
scenarios:
  paths: [lib]
  globs: ["more/*.yaml"]
  variants: [651bd16760e6f6ce]
targets:
  - scripted:bot
  - spec: litellm:openai/gpt-4o-mini
    params: {temperature: 0.7}
    key_env: MY_OPENAI_KEY
    limits: {in_flight: 8, rpm: 500, tpm: 200000}
    price: {input_per_mtok: 0.15, output_per_mtok: 0.6}
conditions: [none, teen_aware]
simulators: [scripted:persona]
judges:
  - {spec: heuristic, rubrics: [teen], when: live}
replicates: 3
seed: 7
max_exchanges: 4
fork: independent
budget: {usd_total: 20, usd_per_target: 5}
execution: {mode: local, retries: 1}
store: results.db
""",
        encoding="utf-8",
    )
    (tmp_path / "lib").mkdir()  # an empty folder is an error (issue 44): it holds a set
    (tmp_path / "lib" / "ed_set.yaml").write_text(
        (FIXTURES / "good" / "ed_set.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "a.yaml").write_text(
        (FIXTURES / "good" / "teen_three_branches.yaml").read_text(encoding="utf-8"),
        encoding="utf-8",
    )  # a variant of it is named by id: load_manifest checks that it is one
    m = load_manifest(path)
    assert [t.spec for t in m.targets] == ["scripted:bot", "litellm:openai/gpt-4o-mini"]
    assert m.targets[0].params == {} and m.targets[0].key_env is None
    assert m.targets[1].limits.rpm == 500 and m.targets[1].price is not None
    assert m.judges[0].when == "live" and m.judges[0].rubrics == ["teen"]
    assert m.execution.retries == 1 and m.budget is not None and m.budget.on_reached == "stop"
    # Paths and globs resolve against the manifest's folder, not the working directory.
    assert scenario_paths(m, tmp_path) == [str(tmp_path / "lib"), str(tmp_path / "more/a.yaml")]
    assert sweep_id_for(m, path) == "sweep-teen-study"


def test_glob_matching_nothing_is_an_error(tmp_path: Path) -> None:
    from branchpoint.core.errors import UserError

    m = Manifest.model_validate({"scenarios": {"globs": ["*.yml"]}, "targets": ["scripted:b"]})
    with pytest.raises(UserError, match=r"scenarios.globs: '\*.yml' matches no file"):
        scenario_paths(m, tmp_path)


def test_json_schema_describes_the_manifest() -> None:
    schema = manifest_json_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["properties"]) >= {
        "scenarios",
        "targets",
        "conditions",
        "simulators",
        "detector",
        "judges",
        "replicates",
        "seed",
        "max_exchanges",
        "fork",
        "budget",
        "execution",
        "store",
    }
    assert schema["required"] == ["scenarios", "targets"]
    target = schema["$defs"]["TargetEntry"]
    assert target["additionalProperties"] is False
    assert target["properties"]["key_env"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]*$"


def test_schema_command_prints_the_sweep_schema() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", "schema", "sweep"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == manifest_json_schema()


def test_an_absolute_glob_works_and_a_rubric_path_is_read_from_the_manifests_folder(
    tmp_path: Path,
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    scenario = FIXTURES / "good" / "teen_three_branches.yaml"
    (lib / "a.yaml").write_text(scenario.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "rubrics").mkdir()
    rubric = REPO / "branchpoint" / "judges" / "rubrics" / "teen.yaml"
    (tmp_path / "rubrics" / "mine.yaml").write_text(rubric.read_text(encoding="utf-8"))
    study = tmp_path / "study"
    study.mkdir()
    path = study / "m.yaml"
    path.write_text(
        f'scenarios: {{globs: ["{lib}/*.yaml"]}}\ntargets: [scripted:bot]\n'
        "judges: [{spec: heuristic, rubrics: [teen, ../rubrics/mine.yaml]}]\n",
        encoding="utf-8",
    )
    m = load_manifest(path)  # was: NotImplementedError ("Non-relative patterns are unsupported")
    assert scenario_paths(m, study) == [str(lib / "a.yaml")]
    assert m.judges[0].rubrics == ["teen", str(study / "../rubrics/mine.yaml")]


def test_schema_rubric_prints_the_rubric_formats_json_schema() -> None:
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    result = CliRunner().invoke(app, ["schema", "rubric"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"criteria", "scale"} <= set(schema["properties"])
    import jsonschema

    from branchpoint.core.yamlio import read_yaml

    data, _, _ = read_yaml(REPO / "branchpoint" / "judges" / "rubrics" / "teen.yaml")
    jsonschema.validate(data, schema)  # the bundled rubric is valid under it


def test_persona_mode_in_a_manifest_plays_every_simulator_adaptively(tmp_path: Path) -> None:
    """Issue 47: ``persona: {mode: adaptive}`` reaches each run's config; a bad mode is one
    positioned line; leaving it out keeps the manifest's hash (each scenario's mode decides)."""
    from branchpoint.study.identity import manifest_hash
    from branchpoint.study.plan import run_configs

    (tmp_path / "s.yaml").write_text(
        (FIXTURES / "good" / "teen_three_branches.yaml").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    base = "scenarios: {paths: [s.yaml]}\ntargets: [scripted:bot]\nsimulators: [scripted:persona]\n"
    plain = tmp_path / "plain.yaml"
    plain.write_text(base, encoding="utf-8")
    adaptive = tmp_path / "adaptive.yaml"
    adaptive.write_text(base + "persona: {mode: adaptive}\n", encoding="utf-8")
    m = load_manifest(adaptive)
    assert m.persona is not None and m.persona.mode == "adaptive"
    ((config, _),) = run_configs(m, adaptive, "sweep-x")
    assert config.persona_mode == "adaptive"
    ((config, _),) = run_configs(load_manifest(plain), plain, "sweep-x")
    assert config.persona_mode is None
    assert manifest_hash(load_manifest(plain)) != manifest_hash(m)
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "persona: {mode: pushy}\n", encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        load_manifest(bad)
    assert [(e.line, e.field) for e in info.value.errors] == [(4, "persona.mode")]
