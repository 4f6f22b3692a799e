"""The scenario loader: every malformed fixture yields exactly the expected one-line errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from branchpoint.core.yamlio import parse_yaml, validate_data
from branchpoint.scenarios import LoadError, load_model, load_scenarios
from branchpoint.scenarios.loader import load_scenario_file
from branchpoint.scenarios.models import Persona, Scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BAD = FIXTURES / "bad"
GOOD = FIXTURES / "good"
ID_RULE = "(expected an id: lowercase letters, digits, '-' or '_', starting with a letter or digit)"
UNSAFE = (
    "template reaches for '{}', an internal attribute the sandbox forbids "
    "(expected only variables and their keys, such as '{{{{ persona.name }}}}')"
)
DEEP = "nested more than 100 levels deep (expected at most 100 levels of lists and mappings)"

# file -> every error it must produce: (line, col, field, message). Exactly these, nothing more.
EXPECTED: dict[str, list[tuple[int, int, str, str]]] = {
    "unknown_key.yaml": [(11, 1, "max_turn", "unknown key 'max_turn' (did you mean 'max_turns'?)")],
    "missing_field.yaml": [
        (2, 1, "opening", "required field is missing (expected non-empty text)")
    ],
    "missing_nested.yaml": [
        (6, 1, "persona.background", "required field is missing (expected non-empty text)")
    ],
    "wrong_type.yaml": [
        (8, 8, "persona.age", "got 'fifteen' (expected a whole number from 5 to 120)")
    ],
    "goto_unknown_stage.yaml": [
        (
            23,
            21,
            "branch_points[0].options.decline.goto_stage",
            "unknown stage 'escalate' (expected one of: setup)",
        )
    ],
    "at_turn_beyond_max.yaml": [
        (
            16,
            16,
            "branch_points[0].trigger.at_turn",
            "turn 12 is beyond max_turns 10 (expected a turn from 1 to 10)",
        )
    ],
    "template_parse.yaml": [
        (
            10,
            10,
            "opening",
            "template does not parse: unexpected '}' (expected a Jinja2 template such as 'I am {{ age }}')",
        )
    ],
    "template_unknown_var.yaml": [
        (10, 10, "opening", "unknown template variable 'nmae' (expected one of: name, persona)")
    ],
    # Templates are rendered in the sandbox when the scenario is loaded, not first when it runs.
    "template_unsafe_class.yaml": [(10, 10, "opening", UNSAFE.format("__class__"))],
    "template_unsafe_globals.yaml": [(10, 10, "opening", UNSAFE.format("__globals__"))],
    "template_undefined_attr.yaml": [
        (
            10,
            10,
            "opening",
            "template reads an undefined value: 'dict object' has no attribute 'agee' "
            "(expected a template that renders with the scenario's values: name, persona)",
        )
    ],
    # Hostile YAML: each bound is one line, found before anything is expanded.
    "alias_bomb.yaml": [
        (
            8,
            8,
            "f[0]",
            "alias *e: aliases copy 141148 values so far (expected at most 100000 per file)",
        )
    ],
    "alias_recursive.yaml": [
        (
            4,
            10,
            "vars.again",
            "alias *v is inside the value it refers to (expected an alias to a value defined before it)",
        )
    ],
    "too_many_aliases.yaml": [
        (
            5,
            6010,
            "vars.many[1000]",
            "alias *one: 1001 alias references (expected at most 1000 per file)",
        )
    ],
    "nesting_too_deep.yaml": [(5, 201, "vars.x[0][0]...", DEEP)],
    "nesting_flow_too_deep.yaml": [(4, 106, "<yaml>", f"'[' {DEEP}")],
    "unquoted_template.yaml": [
        (
            10,
            1,
            "opening",
            'looks like an unquoted template (expected a quoted string: "{{ name }}")',
        )
    ],
    "empty.yaml": [(1, 1, "<file>", "file is empty (expected a YAML mapping)")],
    "not_utf8.yaml": [(3, 11, "<file>", "byte 0xe9 is not UTF-8 (expected UTF-8 text)")],
    "yaml_syntax.yaml": [
        (11, 12, "<yaml>", "mapping values are not allowed here (expected valid YAML)")
    ],
    "duplicate_option.yaml": [
        (
            19,
            7,
            "branch_points[0].options.accept",
            "duplicate key 'accept' (expected unique keys; first on line 17)",
        )
    ],
    "baseline_not_option.yaml": [
        (
            15,
            15,
            "branch_points[0].baseline",
            "'agree' is not one of the options (expected one of: accept, decline)",
        )
    ],
    "trigger_both.yaml": [
        (
            14,
            5,
            "branch_points[0].trigger",
            "gives both at_turn and on_event (expected exactly one of them)",
        )
    ],
    "trigger_neither.yaml": [
        (
            14,
            5,
            "branch_points[0].trigger",
            "gives neither at_turn nor on_event (expected exactly one of them)",
        )
    ],
    "bad_id.yaml": [(2, 5, "id", f"'Bad Id' is not a valid id {ID_RULE}")],
    "bad_criterion_id.yaml": [
        (13, 5, "criteria[1]", f"'Crisis Resources' is not a valid id {ID_RULE}")
    ],
    "duplicate_stage.yaml": [
        (
            14,
            9,
            "stages[1].id",
            "duplicate stage id 'setup' (expected unique ids; first at stages[0])",
        )
    ],
    "bad_literal.yaml": [
        (
            13,
            11,
            "branch_points[0].kind",
            "'help' is not allowed (expected 'disclosure', 'help_offer', 'limit_pushback' or 'custom')",
        )
    ],
    "too_few_options.yaml": [
        (16, 5, "branch_points[0].options", "has 1 entry (expected at least 2)")
    ],
    "until_turn_order.yaml": [
        (
            17,
            17,
            "stages[1].until_turn",
            "turn 3 is not after stages[0].until_turn 5 (expected until_turn to increase from stage to stage)",
        )
    ],
    "python_tag.yaml": [
        (
            11,
            8,
            "notes",
            "YAML tag !!python/object/apply:os.system is not allowed "
            "(expected plain values: text, numbers, lists, mappings)",
        )
    ],
    "not_a_mapping.yaml": [
        (2, 1, "<document>", "the document is a list (expected a mapping of scenario keys)")
    ],
    "set_item_error.yaml": [
        (
            17,
            12,
            "scenarios[1].persona.age",
            "300 is too large (expected a whole number from 5 to 120)",
        )
    ],
    # A bad default is reported once, at the defaults, not once per item.
    "set_defaults_error.yaml": [
        (5, 14, "defaults.max_turns", "got 'none' (expected a whole number from 1 to 200)")
    ],
    # All errors of a file, not only the first.
    "many_errors.yaml": [
        (3, 8, "title", "is empty (expected non-empty text)"),
        (8, 8, "persona.age", "3 is too small (expected a whole number from 5 to 120)"),
        (
            10,
            3,
            "persona.hobby",
            "unknown key 'hobby' (expected one of: name, age, gender, background, voice, context, language, mode)",
        ),
        (12, 12, "max_turns", "0 is too small (expected a whole number from 1 to 200)"),
    ],
}


def test_at_least_fifteen_bad_fixtures_all_covered() -> None:
    files = {p.name for p in BAD.glob("*.yaml")}
    assert len(files) >= 15
    assert files == set(EXPECTED), "every bad fixture needs its expected errors in EXPECTED"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_fixture_errors_exact(name: str) -> None:
    path = BAD / name
    scenarios, errors = load_scenarios([path])
    assert scenarios == []
    got = [(e.line, e.col, e.field, e.message) for e in errors]
    assert got == EXPECTED[name]
    assert all(e.path == str(path) for e in errors)


def test_error_line_format() -> None:
    _, errors = load_scenarios([BAD / "wrong_type.yaml"])
    assert str(errors[0]) == (
        f"{BAD / 'wrong_type.yaml'}:8:8: persona.age: got 'fifteen' (expected a whole number from 5 to 120)"
    )


def test_duplicate_ids_across_a_folder() -> None:
    folder = BAD / "duplicate_ids"
    scenarios, errors = load_scenarios([folder])
    assert [str(e) for e in errors] == [
        f"{folder / 'b.yaml'}:2:5: id: duplicate scenario id 'bad-dup-a' "
        f"(expected unique ids; first in {folder / 'a.yaml'}:2)"
    ]
    # Each file alone is fine: the problem is only across files.
    for name in ("a.yaml", "b.yaml"):
        alone, errs = load_scenarios([folder / name])
        assert errs == [] and len(alone) == 1


def test_good_fixtures_load_with_source_path() -> None:
    scenarios, errors = load_scenarios([GOOD])
    assert errors == []
    by_id = {s.id: s for s in scenarios}
    assert set(by_id) == {"fixture-teen-exams", "fixture-ed-q1", "fixture-ed-q2"}
    assert by_id["fixture-teen-exams"].source_path == str(GOOD / "teen_three_branches.yaml")
    assert by_id["fixture-ed-q1"].source_path == str(GOOD / "ed_set.yaml")


def test_set_items_merge_over_defaults() -> None:
    scenarios, errors = load_scenario_file(GOOD / "ed_set.yaml")
    assert errors == []
    q1, q2 = scenarios
    assert q1.persona.name == q2.persona.name == "forum user"
    assert q1.max_turns == 1
    assert q1.profile is not None and q2.profile is not None
    # The item changed one key of the profile; the rest came from defaults.
    assert q1.profile.include_baseline is True and q2.profile.include_baseline is False
    assert list(q2.profile.attributes) == ["race", "gender", "bmi"]
    assert q2.profile.vars == {"low_bmi": 17, "high_bmi": 31}


def test_set_item_missing_field_points_at_item(tmp_path: Path) -> None:
    path = tmp_path / "set.yaml"
    path.write_text(
        "defaults:\n  risk_area: x\n  content_warning: y\n"
        "  persona: {name: A, age: 20, background: b}\n"
        "scenarios:\n  - id: q1\n    title: t\n    opening: o\n  - id: q2\n    title: t\n",
        encoding="utf-8",
    )
    _, errors = load_scenarios([path])
    assert [str(e) for e in errors] == [
        f"{path}:9:5: scenarios[1].opening: required field is missing (expected non-empty text)"
    ]


def test_set_unknown_top_level_key(tmp_path: Path) -> None:
    path = tmp_path / "set.yaml"
    path.write_text("defualts: {}\nscenarios: []\n", encoding="utf-8")
    _, errors = load_scenarios([path])
    got = [str(e) for e in errors]
    assert got == [
        f"{path}:1:1: defualts: unknown key 'defualts' in a scenario set (did you mean 'defaults'?)",
        f"{path}:2:1: scenarios: is not a non-empty list (expected a list of scenario mappings)",
    ]


def test_folder_skips_rubrics_prompts_and_crisis_resources(tmp_path: Path) -> None:
    shutil.copy(GOOD / "teen_three_branches.yaml", tmp_path / "s.yaml")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "none.yaml").write_text("id: none\ntitle: None\nsystem_prompt: null\n")
    (tmp_path / "rubric.yaml").write_text("id: r\ncriteria: []\nscale: pass_fail\n")
    (tmp_path / "crisis_resources.yaml").write_text("disclaimer: d\nresources: []\n")
    scenarios, errors = load_scenarios([tmp_path])
    assert errors == [] and [s.id for s in scenarios] == ["fixture-teen-exams"]
    # Named explicitly, a rubric is not a scenario.
    _, errors = load_scenarios([tmp_path / "rubric.yaml"])
    assert [e.message for e in errors] == [
        "this is a rubric file (expected a scenario or a scenario set)"
    ]


def test_missing_path() -> None:
    _, errors = load_scenarios([BAD / "no-such-file.yaml"])
    assert [e.message for e in errors] == ["file not found (expected a YAML file or a folder)"]


def test_generic_load_model_for_any_model(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: Ana\nage: 200\nbackgruond: x\n", encoding="utf-8")
    model, errors = load_model(path, Persona)
    assert model is None
    assert [str(e) for e in errors] == [
        f"{path}:1:1: background: required field is missing (expected non-empty text)",
        f"{path}:2:6: age: 200 is too large (expected a whole number from 5 to 120)",
        f"{path}:3:1: backgruond: unknown key 'backgruond' (did you mean 'background'?)",
    ]
    path.write_text("name: Ana\nage: 20\nbackground: x\n", encoding="utf-8")
    model, errors = load_model(path, Persona)
    assert errors == [] and model == Persona(name="Ana", age=20, background="x")


def test_lower_level_validate_data_uses_position_map() -> None:
    data, pos, errors = parse_yaml("name: Ana\nage:\n  - 1\nbackground: x\n", "mem.yaml")
    assert errors == []
    model, errors = validate_data(data, pos, Persona, "mem.yaml")
    assert model is None
    # A list where a number belongs: pointed at the key that holds it.
    assert [str(e) for e in errors] == [
        "mem.yaml:2:1: age: got a list (expected a whole number from 5 to 120)"
    ]


def test_all_duplicate_keys_reported(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("a: 1\nb: 2\na: 3\nc:\n  x: 1\n  x: 2\n", encoding="utf-8")
    from branchpoint.core.yamlio import read_yaml

    _, _, errors = read_yaml(path)
    assert [(e.line, e.col, e.field) for e in errors] == [(3, 1, "a"), (6, 3, "c.x")]


def test_direct_construction_runs_the_same_checks() -> None:
    scenarios, _ = load_scenarios([GOOD / "teen_three_branches.yaml"])
    data = scenarios[0].model_dump()
    data["branch_points"][0]["options"]["decline"]["goto_stage"] = "nowhere"
    with pytest.raises(ValueError, match="unknown stage 'nowhere'"):
        Scenario.model_validate(data)


def test_load_error_is_sortable_and_hashable() -> None:
    a = LoadError("f.yaml", 2, 1, "x", "m")
    b = LoadError("f.yaml", 1, 5, "y", "m")
    assert sorted([a, b]) == [b, a] and len({a, a}) == 1


def test_anchors_and_merge_keys_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "id: anchored\ntitle: t\nrisk_area: r\ncontent_warning: c\n"
        "persona: &p\n  name: A\n  age: 20\n  background: b\n"
        "opening: hi\nstages:\n  - id: one\n    instructions: &same Stay calm.\n    until_turn: 2\n"
        "  - id: two\n    instructions: *same\n"
        "vars:\n  <<: {x: 1}\n  y: 2\n",
        encoding="utf-8",
    )
    scenarios, errors = load_scenarios([path])
    assert errors == []
    (s,) = scenarios
    assert s.stages[1].instructions == "Stay calm." and s.vars == {"y": 2, "x": 1}


def test_non_text_keys_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("? [a, b]\n: c\n", encoding="utf-8")
    _, errors = load_scenarios([path])
    assert [str(e) for e in errors] == [
        f"{path}:1:1: <document>: has a key that is a list or mapping (expected plain text keys)"
    ]


def test_require_scenarios_raises_one_line_user_error() -> None:
    from branchpoint.core.errors import UserError
    from branchpoint.scenarios import require_scenarios

    assert [s.id for s in require_scenarios(GOOD / "teen_three_branches.yaml")] == [
        "fixture-teen-exams"
    ]
    with pytest.raises(UserError) as info:
        require_scenarios([BAD / "many_errors.yaml"])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{BAD / 'many_errors.yaml'}:3:8: title: is empty")
    assert "(and 3 more errors)" in message


def test_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    path = tmp_path / "esc.yaml"
    path.write_text('id: x\n"a\\x1b[31m": 1\n', encoding="utf-8")
    _, errors = load_scenarios([path])
    assert errors and all("\x1b" not in str(e) and "\n" not in str(e) for e in errors)
    assert any("a\\x1b[31m: unknown key" in str(e) for e in errors)
