"""Model text is untrusted: shown literally, never parsed as markup, never driving the terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from fixtures.tui.helpers import HOSTILE, hand_store, settle

from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.safe_text import clean, one_line, untrusted

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]


def test_clean_makes_every_control_character_visible() -> None:
    s = clean("a\x1b[2Jb\x07c\x00d\x7fe\x9bf\rg\r\nh\tI\u202eJ")
    assert s == "a\\x1b[2Jb\\x07c\\x00d\\x7fe\\x9bf\\rg\nh    I\\u202eJ"
    assert all(ch.isprintable() or ch == "\n" for ch in s)
    assert clean(None) == "" and clean("plain text") == "plain text"


def test_untrusted_text_is_never_markup() -> None:
    text = untrusted(HOSTILE)
    assert "[bold red]LOUD[/]" in text.plain and "[@click=app.quit]CLICKME[/]" in text.plain
    assert "[Name]" in text.plain and "[/broken]" in text.plain
    assert not text.spans  # nothing was parsed into a style or an action
    assert "\x1b" not in text.plain and "\x07" not in text.plain
    line = one_line("first\nsecond", width=8)
    assert "\n" not in line.plain and line.plain.endswith("\u2026") and len(line.plain) == 8


async def test_a_hostile_reply_is_shown_literally_in_the_app(tmp_path: Path) -> None:
    store = hand_store(tmp_path / "h.db", [HOSTILE], [[("no_diagnosis", "fail", "[/broken]")]])
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        screen = app.screen
        view = screen.views[1]
        shown = "".join(seg.text for seg in view.render_lines(view.region.reset_offset)[0])
        assert shown  # it rendered, the broken closing tag did not raise
        body = "\n".join(
            "".join(seg.text for seg in strip)
            for strip in view.render_lines(view.region.reset_offset)
        )
        assert "[@click=app.quit]CLICKME[/]" in body and "[Name]" in body
        assert "\\x1b]52;c;" in body and "\x1b" not in body
        await pilot.click(view, offset=(20, 1))  # clicking the would-be action does nothing
        await settle(pilot)
        assert app.is_running and app.screen is screen
    store.close()


def _run_in_pty(args: list[str], wait_for: bytes, timeout: float = 60.0) -> bytes:
    """Run the real command in a pseudo-terminal (160x48); return every byte it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="160", LINES="48", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchpoint.tui.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    out = b""
    quit_sent = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            if not quit_sent and wait_for in out:
                time.sleep(0.5)  # let it finish drawing
                os.write(master, b"\x11")  # ctrl+q
                quit_sent = True
            if proc.poll() is not None and not ready:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        os.close(master)
    assert quit_sent, f"the app never showed {wait_for!r}; it wrote: {out[-2000:]!r}"
    return out


@pytest.mark.slow
def test_the_bytes_written_to_a_terminal_hold_no_escape_from_the_model(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    hand_store(db, [HOSTILE], []).close()
    out = _run_in_pty(["tui", "--db", str(db), "--conversation", "c1"], b"CLICKME")
    # The model's sequences arrive as visible text: the ESC byte written as its escape, \x1b.
    assert b"\\x1b[31;7mREDTEXT" in out
    assert b"\\x1b]52;c;T1NDNTJQQVlMT0FE\\x07" in out
    assert b"[@click=app.quit]CLICKME[/]" in out
    # ... and never as sequences: no clipboard write, no title change, no colour from the model.
    assert b"\x1b]52" not in out
    assert b"\x1b]0;TITLEPWN" not in out and b"TITLEPWN\x07" not in out
    assert b"\x1b[31;7m" not in out
