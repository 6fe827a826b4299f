"""netlint.commands.common.write_atomically: a regular file is replaced whole; a FIFO or a device (`-o /dev/null`)
is written in place, never renamed over (that replaced /dev/null with a regular file when run as root)."""

from __future__ import annotations

import os
import stat
import sys
import threading

import pytest

from netlint.commands.common import write_atomically


def test_a_regular_file_is_replaced_and_no_temporary_is_left(tmp_path):
    out = tmp_path / "report.txt"
    out.write_text("old", encoding="utf-8")
    write_atomically(out, "new")
    assert out.read_text(encoding="utf-8") == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    write_atomically(fifo, "report text")
    reader.join(timeout=30)
    assert received == ["report text"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]


def test_a_folder_is_a_usage_error(tmp_path):
    from netlint.errors import UsageError

    with pytest.raises(UsageError, match="cannot write"):
        write_atomically(tmp_path, "text")
