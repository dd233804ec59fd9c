"""What a user's terminal is left showing (issue 42): the real CLI run in a
pseudo-terminal of 80x24, its output replayed through a VT100 screen
(pyte).  The survey's progress is one live region on stderr that leaves
nothing behind; the screen ends with the answers and the survey's last line."""
import os
import pty
import select
import subprocess
import sys
import time

import pytest

pyte = pytest.importorskip("pyte")

COLS, ROWS = 80, 24


def run_in_terminal(argv, env, timeout=240):
    """Run argv with stdin/stdout/stderr on a pty of COLS x ROWS; return the
    pyte screen after it ended, and its exit status."""
    import fcntl
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = dict(env, TERM="xterm", COLUMNS=str(COLS), LINES=str(ROWS))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            close_fds=True)
    os.close(slave)
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:          # EIO: the child closed the terminal
                    break
                if not data:
                    break
                stream.feed(data)
            elif proc.poll() is not None:
                break
        status = proc.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return screen, status


@pytest.mark.measuring
def test_a_survey_at_80x24_ends_with_its_answers_and_leaves_no_progress_behind(tmp_path):
    env = dict(os.environ, MEMFX_CACHE_DIR="off")
    screen, status = run_in_terminal(
        [sys.executable, "-m", "memfx", "survey", "--quick", "--only", "misaligned,atomics",
         "--no-advise", "--db", str(tmp_path / "t.db"), "-o", str(tmp_path / "r.html")], env)
    lines = [line.rstrip() for line in screen.display]
    text = "\n".join(lines)
    assert status == 0, text
    shown = [line for line in lines if line]
    # the screen ends with the survey's last line (a long report path may
    # wrap it onto a second row), the answers just above it
    last = [i for i, line in enumerate(shown) if line.startswith("survey s-")]
    assert last and " complete in " in shown[last[-1]] and last[-1] >= len(shown) - 2, text
    assert any(line.strip().startswith("misaligned.line_split_load ") for line in shown), text
    assert any(line.strip().startswith("atomics.cas_ratio ") for line in shown), text
    # nothing of the live region is left: no bar, no round, no cell, no ETA
    for debris in ("round ", "cell ", "━", "left", "replica "):
        assert not any(debris in line for line in shown), (debris, text)
    # every line fits the terminal and nothing was cut with an ellipsis
    assert all(len(line) <= COLS for line in lines)
    assert "…" not in text
