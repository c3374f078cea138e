"""Runs on Ray workers equal single-process runs (docs/scaling.md).

On these machines a test may send traffic only to loopback, and Ray picks the machine's own
address for its node. So every Ray instance of these tests runs in a process inside a network
namespace of its own with only loopback up (``unshare --net``, then ``ip link set lo up``), where
Ray binds 127.0.0.1; the tests skip with the reason where such a namespace cannot be made.
"""

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from mlm_ppl.cli import main

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"


def _netns_prefix():
    """``unshare ... sh -c`` running its arguments with only loopback up; skip where impossible."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'mlm-ppl[ray]')")
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("a private network namespace needs root, unshare(1) and ip(8)")
    probe = subprocess.run(["unshare", "--net", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.strip()}")
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']


def _cli_in_netns(*args):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [*_netns_prefix(), sys.executable, "-m", "mlm_ppl.cli", *map(str, args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _sample(model_dir, out, *extra):
    return ["sample", "--model", model_dir, "--template", TEMPLATE, "--chains", "4", "--draws", "200",
            "--seed", "3", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def _draws(directory):
    idata = az.from_netcdf(os.path.join(directory, "run.nc"))
    return idata.posterior["tokens"].values, idata.sample_stats["lp"].values


def test_a_ray_run_equals_the_single_process_run_even_when_a_worker_is_killed(model_dir, tmp_path):
    single = tmp_path / "single"
    assert main(_sample(model_dir, single)) == 0
    tokens, lp = _draws(single)

    out = tmp_path / "ray"
    proc = _cli_in_netns(*_sample(model_dir, out, "--ray", "--workers", "2", "--draws", "1000",
                                  "--checkpoint-seconds", "0"))  # fmt: skip
    deadline = time.time() + 600
    victim = None
    while victim is None:  # a worker that has checkpointed, then killed
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        if (out / "checkpoint-g1.pt").exists():
            victim = _ray_worker_pid()
        time.sleep(0.1)
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    long_tokens, long_lp = _draws(out)
    whole = tmp_path / "whole"
    assert main(_sample(model_dir, whole, "--draws", "1000")) == 0
    want_tokens, want_lp = _draws(whole)
    np.testing.assert_array_equal(long_tokens, want_tokens)
    np.testing.assert_allclose(long_lp, want_lp, rtol=1e-5)
    # and a short Ray run is the short single-process run
    short = tmp_path / "short"
    proc = _cli_in_netns(*_sample(model_dir, short, "--ray", "--workers", "2"))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    got_tokens, got_lp = _draws(short)
    np.testing.assert_array_equal(got_tokens, tokens)
    np.testing.assert_allclose(got_lp, lp, rtol=1e-5)
    assert (short / "summary.txt").read_bytes() == (single / "summary.txt").read_bytes()  # one lp per state
    # a Ray run's chains are where the single-process run's are: --starts-from reads its groups (issue 47, row 13)
    from mlm_ppl import rundir

    assert torch.equal(rundir.chain_states(short)[0], rundir.chain_states(single)[0])
    assert main(_sample(model_dir, tmp_path / "next", "--starts-from", str(short), "--draws", "2")) == 0


def _ray_worker_pid():
    """The pid of a live Ray worker running a group of chains (its process title), or None."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if fh.read().startswith(b"ray::_Worker"):
                        return int(entry)
            except OSError:  # the process ended meanwhile
                continue
    return None


def test_bad_ray_arguments_are_refused_before_any_work(model_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main(_sample(model_dir, out, "--workers", "2")) == 2
    assert "--workers applies to --ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    assert main(_sample(model_dir, out, "--ray")) == 2
    assert "pip install 'mlm-ppl[ray]'" in capsys.readouterr().err
    assert not out.exists()


def test_an_unreachable_cluster_is_a_clear_error_within_seconds(model_dir, tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'mlm-ppl[ray]')")
    assert main(_sample(model_dir, tmp_path / "w", "--ray", "--workers", "0")) == 2
    assert "workers must be an integer >= 1" in capsys.readouterr().err
    with socket.socket() as s:  # a loopback port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    t0 = time.monotonic()
    assert main(_sample(model_dir, tmp_path / "x", "--ray", "--workers", "2")) == 2
    assert time.monotonic() - t0 < 30
    assert f"cannot reach the Ray cluster at '127.0.0.1:{port}'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


API_SCRIPT = """
import sys, torch
from mlm_ppl import load_mlm, sample
mlm = load_mlm(sys.argv[1])
start = sample(mlm, "A[MASK]C[MASK][MASK]", num_chains=3, num_samples=1, seed=1).tokens[:, 0]
local = sample(mlm, "A[MASK]C[MASK][MASK]", num_chains=3, num_samples=40, seed=2, init=start, kernel="surrogate-mh")
ray = sample(mlm, "A[MASK]C[MASK][MASK]", num_chains=3, num_samples=40, seed=2, init=start, kernel="surrogate-mh",
             workers=2)
assert torch.equal(local.tokens, ray.tokens) and torch.equal(local.initial, ray.initial), "draws differ"
assert torch.allclose(local.stats["lp"], ray.stats["lp"]) and local.attrs == ray.attrs, "statistics differ"
four = sample(mlm, "A[MASK]C[MASK][MASK]", num_chains=4, num_samples=30, seed=4)
two = sample(mlm, "A[MASK]C[MASK][MASK]", num_chains=2, num_samples=30, seed=4, workers=2)
assert torch.equal(four.tokens[:2], two.tokens), "2 chains on Ray differ from the first 2 of 4"
print("same")
"""


def test_the_api_on_ray_gives_the_local_run(model_dir):
    """sample(..., workers=2): 3 chains on 2 workers (groups of 2 and 1), given starting tokens,
    equal the local run; 2 chains on 2 Ray workers are the first 2 chains of a local 4-chain run."""
    cmd = [*_netns_prefix(), sys.executable, "-c", API_SCRIPT, model_dir]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("same"), done.stderr[-3000:]


def test_a_batch_on_ray_gives_the_local_batch(model_dir, tmp_path):
    """--templates with --ray --workers 2: the templates as Ray tasks, the same designs.tsv."""
    templates = tmp_path / "templates.tsv"
    templates.write_text("h1\tA[MASK]C[MASK][MASK]\nD[MASK]C[MASK]E\nlast\tAC[MASK]E[MASK]\n")
    common = ["sample", "--model", model_dir, "--templates", str(templates), "--chains", "2", "--draws", "30",
              "--seed", "5", "--no-progress"]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    proc = _cli_in_netns(*common, "--out", tmp_path / "ray", "--ray", "--workers", "2")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert (tmp_path / "ray" / "designs.tsv").read_text() == (tmp_path / "local" / "designs.tsv").read_text()


@pytest.mark.parametrize(
    "gpus, workers, share",
    [(2, 3, 0.5), (3, 16, 0.1666), (1, 7, 0.1428), (4, 2, 1.0), (1, 1, 1.0), (0.5, 2, 0.25)],
)
def test_every_worker_s_gpu_share_can_be_placed(gpus, workers, share):
    """Ray never splits one worker's GPUs over two devices: k = ceil(workers / GPUs) workers share
    each GPU, so each asks 1/k (rounded down to Ray's 0.0001); 2 GPUs and 3 workers asked 0.667
    each, and the third never started."""
    from mlm_ppl.inference.distributed import gpu_share

    got = gpu_share({"GPU": float(gpus)}, workers, "cuda")
    assert got == pytest.approx(share)
    per_device = math.ceil(workers / math.floor(gpus)) if gpus >= 1 else workers
    assert got * per_device <= (1.0 if gpus >= 1 else gpus) + 1e-12
    assert gpu_share({"GPU": float(gpus)}, workers, "cpu") == 0.0 and gpu_share({}, workers, None) == 0.0
    with pytest.raises(ValueError, match="needs GPUs in the Ray cluster; it has 0"):
        gpu_share({}, workers, "cuda:0")
