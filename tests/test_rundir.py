"""Checkpoints on disk: every kernel's state round-trips, and a resumed run equals the whole run."""

import pytest
import torch

from mlm_ppl import MaskedLMDistribution, rundir
from mlm_ppl.inference import make_kernel, run_chains
from mlm_ppl.inference.annealing import GeometricAnnealing

TEMPLATE = "A[MASK]C[MASK][MASK]"


@pytest.mark.parametrize("kernel", ["mh", "surrogate-mh", "pseudo-gibbs", "mask-predict"])
def test_a_run_resumed_from_a_checkpoint_on_disk_equals_the_whole_run(tiny4, tmp_path, kernel):
    k = make_kernel(kernel, MaskedLMDistribution(tiny4, TEMPLATE))
    whole = run_chains(k, 3, 6, warmup_steps=2, seed=4)
    saved = []

    def keep(cp):
        if cp.step == 5:
            rundir.save_checkpoint(run_dir, cp, {"seed": 4})
            saved.append(cp.step)

    with rundir.RunDirectory.create(tmp_path / "run", "sample") as run_dir:
        run_chains(k, 3, 6, warmup_steps=2, seed=4, on_checkpoint=keep, checkpoint_seconds=0)
    assert saved == [5]
    resumed = run_chains(k, 3, 6, warmup_steps=2, seed=4, resume=rundir.load_checkpoint(run_dir.path))
    assert torch.equal(resumed.tokens, whole.tokens)
    assert set(resumed.stats) == set(whole.stats)
    for name, values in whole.stats.items():
        assert torch.allclose(resumed.stats[name].double(), values.double(), rtol=0, atol=0, equal_nan=True), name


@pytest.mark.parametrize("kernel", ["mh", "surrogate-mh"])
def test_a_checkpoint_of_fewer_draws_continues_to_a_raised_cap(tiny4, kernel):
    """The checkpoint of a finished run of 6 draws (or of one interrupted at 4) continues to 10: the
    draws of a run of 10. An annealing kernel, whose schedule spans the run, refuses."""
    k = make_kernel(kernel, MaskedLMDistribution(tiny4, TEMPLATE))
    whole = run_chains(k, 3, 10, warmup_steps=2, seed=4)
    cps = []
    run_chains(k, 3, 6, warmup_steps=2, seed=4, on_checkpoint=cps.append, checkpoint_seconds=0)
    for cp in (cps[-1], next(cp for cp in cps if cp.step == 6)):
        raised = run_chains(k, 3, 10, warmup_steps=2, seed=4, resume=cp)
        assert torch.equal(raised.tokens, whole.tokens)
        for name, values in whole.stats.items():
            assert torch.equal(raised.stats[name].double(), values.double()), name
    schedule = GeometricAnnealing(1, 0.1, 7)
    annealing = make_kernel("mh", MaskedLMDistribution(tiny4, TEMPLATE), temperature_schedule=schedule)
    cps.clear()
    run_chains(annealing, 3, 6, warmup_steps=2, seed=4, on_checkpoint=cps.append, checkpoint_seconds=0)
    with pytest.raises(ValueError, match="the kernel anneals over the run's steps"):
        run_chains(annealing, 3, 10, warmup_steps=2, seed=4, resume=cps[-1])


def test_a_nested_state_is_read_as_the_class_it_names_or_as_its_annotation(tiny4, tmp_path):
    """Surrogate-MH's inner state is MH's on a fixed template and gap-jump's on a variable gap: the
    checkpoint names its class. One written before states were named (0.3) is read as the field's
    annotation, MH's: a run of 0.3 resumes."""
    k = make_kernel("surrogate-mh", MaskedLMDistribution(tiny4, TEMPLATE), inner_steps=2)
    cps = []
    run_chains(k, 2, 3, seed=1, on_checkpoint=cps.append, checkpoint_seconds=0)
    with rundir.RunDirectory.create(tmp_path / "run", "sample") as run_dir:
        rundir.save_checkpoint(run_dir, cps[-1], {"seed": 1})
    file = run_dir.path / rundir.CHECKPOINT
    payload = torch.load(file, weights_only=True)
    assert payload["state"]["inner"]["state"] == "MHState"
    assert torch.equal(rundir.load_checkpoint(run_dir.path).state.inner.tokens, cps[-1].state.inner.tokens)
    del payload["state"]["inner"]["state"]  # as 0.3 wrote it
    torch.save(payload, file)
    assert torch.equal(rundir.load_checkpoint(run_dir.path).state.inner.cond_logits, cps[-1].state.inner.cond_logits)
    payload["state"]["inner"]["state"] = "NoSuchState"
    torch.save(payload, file)
    with pytest.raises(ValueError, match="kernel state NoSuchState is not one of this version's kernels"):
        rundir.load_checkpoint(run_dir.path)


def test_checkpoints_of_another_format_or_kernel_are_refused_by_name(tiny4, tmp_path):
    """A checkpoint of 0.2 (format run-1), or one whose statistics are not its kernel's, is refused
    with a message that says what it is; a checkpoint is read with torch.load(weights_only=True)."""
    k = make_kernel("mh", MaskedLMDistribution(tiny4, TEMPLATE))
    cps = []
    run_chains(k, 2, 4, seed=1, on_checkpoint=cps.append, checkpoint_seconds=0)
    with rundir.RunDirectory.create(tmp_path / "run", "sample") as run_dir:
        rundir.save_checkpoint(run_dir, cps[-1], {"seed": 1})
    file = run_dir.path / rundir.CHECKPOINT
    payload = torch.load(file, weights_only=True)
    assert payload["kernel"] == "mh" and payload["settings"] == {"seed": 1}
    torch.save({**payload, "format": "mlm-ppl-run-1"}, file)
    with pytest.raises(ValueError, match="written by mlm-ppl 0.2 or earlier.*finish the run with that version"):
        rundir.load_checkpoint(run_dir.path)
    stats = {k: v for k, v in payload["stats"].items() if k != "evaluated"}
    torch.save({**payload, "stats": stats}, file)
    with pytest.raises(ValueError, match="statistics .* mh reports"):
        rundir.load_checkpoint(run_dir.path)
    torch.save({**payload, "kernel": "no-such-kernel"}, file)
    with pytest.raises(ValueError, match="its kernel 'no-such-kernel' is unknown"):
        rundir.load_checkpoint(run_dir.path)


@pytest.mark.parametrize("where", ["fsync", "close", "replace"])
def test_an_interrupt_during_an_atomic_write_stays_an_interrupt(tmp_path, monkeypatch, where):
    """Ctrl-C that lands anywhere in a write (here: just after each system call returns) propagates
    as KeyboardInterrupt, leaves the old file or the new one whole and no temporary file, and closes
    the descriptor exactly once (a second close raised EBADF, which the CLI reported as an error)."""
    import os

    from mlm_ppl import _files

    target = tmp_path / "f.txt"
    target.write_text("old")
    closed = []
    real = {"fsync": os.fsync, "close": os.close, "replace": os.replace}

    def interrupted(name):
        def call(*args):
            real[name](*args)
            if name == "close":
                closed.append(args[0])
            if name == where:
                raise KeyboardInterrupt

        return call

    for name in real:
        monkeypatch.setattr(_files.os, name, interrupted(name))
    with pytest.raises(KeyboardInterrupt):
        _files.write_text_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == ("new" if where == "replace" else "old")
    assert len(closed) == 1 and os.listdir(tmp_path) == ["f.txt"]


def test_written_files_get_the_permissions_of_an_ordinary_write(tmp_path):
    """Temporary files are created 0600; the file put in place has the mode ``open()`` would give."""
    import os
    import stat

    from mlm_ppl import _files

    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    _files.write_text_atomic(tmp_path / "atomic.txt", "x")
    mode = stat.S_IMODE(os.stat(tmp_path / "atomic.txt").st_mode)
    assert mode == stat.S_IMODE(os.stat(plain).st_mode) == _files.FILE_MODE


def test_reading_the_checkpoint_of_a_run_that_has_none_yet_says_so(tmp_path):
    """A run stopped before its first checkpoint: run_checkpoint (and chain_states) say it has no
    checkpoint yet, not that config.json differs from an empty record in every setting."""
    from mlm_ppl.settings import RunSettings
    from mlm_ppl.testing import save_tiny, tiny_residue_bert

    model = save_tiny(tiny_residue_bert("ACDE", seed=1), tmp_path / "model")
    settings = RunSettings(model=str(model), template="A[MASK]C", num_chains=2, num_samples=3).with_model_files()
    rundir.start_run(tmp_path / "run", settings).close()
    for read in (rundir.run_checkpoint, rundir.chain_states):
        with pytest.raises(ValueError, match=r"has no checkpoint\.pt to read \(it has no checkpoint yet\)$"):
            read(tmp_path / "run")
