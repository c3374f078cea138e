"""Checks the command-line tests share (imported by name: pytest puts this folder on sys.path)."""

import json
import os
import time

import torch

from mlm_ppl.settings import RunSettings


def one_line_error(capsys):
    """The error line of a failed command: one line, no traceback (progress or notes may precede it)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("mlm-ppl ")]
    assert "Traceback" not in err and len(lines) == 1 and err.endswith(lines[0] + "\n"), err
    return lines[0]


def recorded_settings(directory):
    """The settings a run directory records (read, not locked)."""
    config = json.loads((directory / "config.json").read_text())
    return RunSettings.from_dict({k: v for k, v in config.items() if k != "format"})


def wait_for_checkpoint(directory, proc, min_step, timeout=120):
    """The step of the first checkpoint at ``min_step`` or later that a running ``proc`` writes in ``directory``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        try:
            step = torch.load(os.path.join(directory, "checkpoint.pt"), weights_only=True)["step"]
            if step >= min_step:
                return step
        except Exception:  # not written yet, or being replaced
            pass
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")
