"""Time and peak memory of ``branchpoint validate`` on hostile YAML, one process per file.

    .venv/bin/python benchmarks/hostile_yaml.py

Writes each attack to a temporary folder (an alias bomb, a 50 MB file, 10,000-deep nesting in
flow and block style, too many aliases, a long text aliased many times), runs the installed
``branchpoint validate`` on it and prints the CPU seconds, wall seconds and peak memory of that
process (from ``wait4``) with the first line it printed. The acceptance bound is under 1 s and
200 MB each; a plain scenario file is measured first as the command's own start-up cost. Last, the
in-process parse time of a legitimate file just inside the alias bounds (what an accepted file
may cost).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from branchpoint.core.yaml_limits import MAX_ALIAS_VALUES, MAX_ALIASES  # noqa: E402
from branchpoint.core.yamlio import parse_yaml  # noqa: E402

EXE = Path(sys.executable).parent / "branchpoint"


def bomb() -> str:
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(rows) + "\n"


def attacks(folder: Path) -> dict[str, Path]:
    files = {
        "plain scenario (start-up)": REPO
        / "tests"
        / "fixtures"
        / "good"
        / "teen_three_branches.yaml"
    }

    def put(name: str, text: str) -> None:
        path = folder / f"{name.split()[0]}.yaml"
        path.write_text(text, encoding="utf-8")
        files[name] = path

    put("bomb (9 lines)", bomb())
    put("flow-deep 10,000", "x: " + "[" * 10_000 + "]" * 10_000 + "\n")
    put("block-deep 10,000", "x:\n" + "- " * 10_000 + "deep\n")
    put("aliases 10,000", "a: &a x\nb: [" + ", ".join(["*a"] * 10_000) + "]\n")
    put(
        "text-copies 900 x 6 kB", "a: &a " + "x" * 6000 + "\nb: [" + ", ".join(["*a"] * 900) + "]\n"
    )
    big = folder / "big.yaml"
    with big.open("wb") as f:
        while f.tell() < 50 * 2**20:
            f.write(b"- lol lol lol lol lol lol lol lol\n" * 4096)
    files["50 MB file"] = big
    return files


def measure(path: Path) -> tuple[float, float, float, str]:
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(EXE), "validate", str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    assert proc.stdout is not None
    first = proc.stdout.read().decode("utf-8", "replace").splitlines()[0]
    proc.stdout.close()
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024, first


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = attacks(Path(tmp))
        measure(files["plain scenario (start-up)"])  # compile bytecode outside the figures
        print(f"{'file':28} {'cpu s':>6} {'wall s':>6} {'peak MiB':>8}  first line")
        for name, path in files.items():
            cpu, wall, peak, first = measure(path)
            shown = first.replace(str(path), path.name)
            print(f"{name:28} {cpu:6.2f} {wall:6.2f} {peak:8.0f}  {shown[:110]}")
    per = MAX_ALIAS_VALUES // MAX_ALIASES * 10 - 1  # list items per anchor, just inside the bound
    refs = MAX_ALIAS_VALUES // (per + 1)
    text = "a: &a [" + ",".join(["1"] * per) + "]\nb: [" + ", ".join(["*a"] * refs) + "]\n"
    start = time.perf_counter()
    _, _, errors = parse_yaml(text, "inside.yaml")
    took = time.perf_counter() - start
    assert not errors, errors
    print(
        f"accepted file, {refs} aliases copying {refs * (per + 1)} values: parsed in {took:.2f} s"
    )


if __name__ == "__main__":
    main()
