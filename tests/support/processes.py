"""Reading a binary's output as it runs, for tests that act at a line (kill at a step, start a
fault at a step)."""

import threading


def finish(proc, on_line=None) -> tuple[str, str]:
    """(stdout, stderr) of the Popen `proc` (text mode, both piped); `on_line(line)` is called on
    each stdout line as it comes. stderr is drained by a thread so a chatty binary cannot block."""
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    out = []
    for line in proc.stdout:
        out.append(line)
        if on_line:
            on_line(line)
    proc.wait(timeout=600)
    reader.join(timeout=60)
    return "".join(out), "".join(err)
