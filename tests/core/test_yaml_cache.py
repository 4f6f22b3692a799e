"""The YAML parse cache: a clean text is parsed once, then read back identically; a text with
errors is parsed (and its errors worded) every time; a damaged cache file costs only speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from branchpoint.core import yamlio
from branchpoint.scenarios.bundled import LIBRARY
from branchpoint.scenarios.loader import load_scenarios


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BRANCHPOINT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BRANCHPOINT_YAML_CACHE", raising=False)
    return tmp_path / "cache" / "yaml"


def _big_file() -> Path:
    return max(LIBRARY.rglob("*.yaml"), key=lambda p: p.stat().st_size)


def test_a_clean_file_is_parsed_once_then_read_back_the_same(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big_file()
    first = yamlio.read_yaml(path)
    assert not first[2] and len(list(cache_dir.iterdir())) == 1

    def no_parsing(*_a: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(yamlio, "_parse_yaml", no_parsing)
    again = yamlio.read_yaml(path)
    assert again[0] == first[0] and dict(again[1]) == dict(first[1]) and again[2] == []
    monkeypatch.undo()
    assert yamlio._parse_yaml(path.read_text(), path)[:2] == (first[0], first[1])


def test_the_library_loads_the_same_from_the_cache(cache_dir: Path) -> None:
    cold, cold_errors = load_scenarios([LIBRARY])
    warm, warm_errors = load_scenarios([LIBRARY])
    assert cold_errors == warm_errors == []
    assert [s.model_dump() for s in cold] == [s.model_dump() for s in warm]
    assert [(s.source_path, s.source_pos) for s in cold] == [
        (s.source_path, s.source_pos) for s in warm
    ]


def test_errors_are_never_cached_and_an_edit_is_a_miss(cache_dir: Path, tmp_path: Path) -> None:
    text = _big_file().read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "\nbroken: [unclosed\n")
    first = yamlio.read_yaml(bad)
    assert first[2] and "expected valid YAML" in str(first[2][0])
    assert yamlio.read_yaml(bad)[2] == first[2]
    assert not cache_dir.exists() or not list(cache_dir.iterdir())
    good = tmp_path / "good.yaml"
    good.write_text(text)
    yamlio.read_yaml(good)
    good.write_text(text.replace("title:", "title: edited", 1))
    assert "edited" in str(yamlio.read_yaml(good)[0])
    assert len(list(cache_dir.iterdir())) == 2


def test_a_damaged_cache_file_is_ignored(cache_dir: Path) -> None:
    path = _big_file()
    expected = yamlio.read_yaml(path)
    (entry,) = cache_dir.iterdir()
    entry.write_bytes(b"\x00garbage")
    again = yamlio.read_yaml(path)
    assert again[0] == expected[0] and dict(again[1]) == dict(expected[1])


def test_the_cache_can_be_turned_off(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRANCHPOINT_YAML_CACHE", "0")
    yamlio.read_yaml(_big_file())
    assert not cache_dir.exists()
