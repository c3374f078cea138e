"""Same draws before and after a refactor: every kernel, every scan, the Pyro paths, the CLI, a
Ray run and a batch, each reduced to a SHA-256 of its tokens and per-draw statistics.

Run it on two commits and compare the outputs line by line (``diff``): a refactor that changes
no behaviour prints the same digests. Only public entry points are used (``mlm_ppl.sample``,
``MLMKernel``, ``MLMGibbs``, the command line), so the script runs unchanged on both sides.

    python benchmarks/same_draws.py > before.txt   # on the old commit
    python benchmarks/same_draws.py > after.txt    # on the new one
    diff before.txt after.txt

The Ray and batch-on-Ray cases run the command line inside a private network namespace
(``unshare --net``; root only), as the Ray tests do; elsewhere they print ``skipped``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(1)

import pyro  # noqa: E402
import pyro.distributions as pdist  # noqa: E402
from pyro.infer import MCMC, NUTS  # noqa: E402

import mlm_ppl  # noqa: E402
from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel, testing  # noqa: E402

TEMPLATE = "A[MASK]C[MASK][MASK]"
COMPARED = ("lp", "is_accepted", "acceptance_rate", "n_changed", "n_moves", "inner_acceptance", "masked_copies")
"""The per-draw statistics digested: those every version has. A statistic a version adds (0.3: MH's
``evaluated``) is listed on its ``stats`` line, so the diff shows it, but does not change the digests."""


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        if isinstance(a, dict):
            for k in sorted(k for k in a if k in COMPARED):
                h.update(k.encode())
                h.update(np.ascontiguousarray(torch.as_tensor(a[k]).double().numpy()).tobytes())
        elif isinstance(a, (str, bytes)):
            h.update(a.encode() if isinstance(a, str) else a)
        else:
            h.update(np.ascontiguousarray(torch.as_tensor(a).double().numpy()).tobytes())
    return h.hexdigest()[:16]


def report(name: str, value: str) -> None:
    print(f"{name:<48} {value}", flush=True)


def api_cases(mlm) -> None:
    common = dict(num_chains=3, num_samples=25, warmup_steps=3, seed=11)
    cases = {
        "mh random": dict(kernel="mh"),
        "mh random_sweep": dict(kernel="mh", scan="random_sweep"),
        "mh left_to_right": dict(kernel="mh", scan="left_to_right"),
        "mh block 2": dict(kernel="mh", block_size=2),
        "mh top_k 2 top_p 0.9": dict(kernel="mh", top_k=2, top_p=0.9),
        "mh proposal_temperature 2 raw T 0.5": dict(
            kernel="mh", proposal_temperature=2.0, energy="raw", temperature=0.5
        ),
        "mh init greedy": dict(kernel="mh", init="greedy"),
        "mh init uniform thin 2": dict(kernel="mh", init="uniform", thin=2),
        "surrogate-mh": dict(kernel="surrogate-mh"),
        "surrogate-mh window 1 inner 5": dict(kernel="surrogate-mh", surrogate_window=1, inner_steps=5),
        "surrogate-mh bfloat16": dict(kernel="surrogate-mh", surrogate_dtype="bfloat16"),
        "pseudo-gibbs random": dict(kernel="pseudo-gibbs"),
        "pseudo-gibbs random_sweep": dict(kernel="pseudo-gibbs", scan="random_sweep"),
        "pseudo-gibbs left_to_right": dict(kernel="pseudo-gibbs", scan="left_to_right"),
        "pseudo-gibbs parallel_masked": dict(kernel="pseudo-gibbs", scan="parallel_masked"),
        "pseudo-gibbs parallel_unmasked top_k burnin": dict(
            kernel="pseudo-gibbs", scan="parallel_unmasked", top_k=2, burnin=4
        ),
        "mask-predict": dict(kernel="mask-predict", iterations=3),
    }
    for name, options in cases.items():
        run = mlm_ppl.sample(mlm, TEMPLATE, **{**common, **options})
        report(f"api {name}", digest(run.tokens, run.stats, run.initial))
        report(f"  stats {name}", " ".join(sorted(run.stats)))
    factor = lambda x: (x == mlm.vocab.index("D")).sum(-1).double() * 0.7
    run = mlm_ppl.sample(mlm, TEMPLATE, log_factor=factor, **common)
    report("api mh log_factor", digest(run.tokens, run.stats, run.initial))
    run = mlm_ppl.sample(mlm, TEMPLATE, kernel="surrogate-mh", log_factor=factor, **common)
    report("api surrogate-mh log_factor", digest(run.tokens, run.stats, run.initial))
    sched = mlm_ppl.inference.geometric_annealing(2.0, 0.2, 20)
    run = mlm_ppl.sample(mlm, TEMPLATE, temperature_schedule=sched, **common)
    report("api mh annealed", digest(run.tokens, run.stats, run.initial))
    dist = MaskedLMDistribution(mlm, TEMPLATE, sampler_options=dict(seed=5, num_steps=12))
    report("distribution.sample", digest(dist.sample((3,))))


def pyro_cases(mlm) -> None:
    dist = MaskedLMDistribution(mlm, TEMPLATE)
    d_id = mlm.vocab.index("D")

    def one_site():
        x = pyro.sample("x", dist)
        pyro.factor("f", 0.5 * (x == d_id).sum().double())

    for name, kw in {
        "mh": dict(kernel="mh"),
        "mh batched 3": dict(kernel="mh", num_chains=3),
        "pseudo-gibbs": dict(kernel="pseudo-gibbs"),
        "surrogate-mh": dict(kernel="surrogate-mh"),
    }.items():
        model = one_site if kw["kernel"] != "pseudo-gibbs" else (lambda: pyro.sample("x", dist))
        k = MLMKernel(model, seed=4, **kw)
        mcmc = MCMC(k, num_samples=15, warmup_steps=3, num_chains=2, disable_progbar=True, mp_context=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run()
        x = mcmc.get_samples(group_by_chain=True)["x"]
        report(f"MLMKernel {name}", digest(x, *[s for s in k.draw_stats], *k.initial_states))

    def continuous():
        mu = pyro.sample("mu", pdist.Normal(0.0, 1.0))
        x = pyro.sample("x", dist)
        pyro.sample("y", pdist.Normal(mu + (x == d_id).sum().double(), 1.0), obs=torch.tensor(1.5))

    pyro.set_rng_seed(0)
    g = MLMGibbs(NUTS(continuous), seed=2)
    mcmc = MCMC(g, num_samples=10, warmup_steps=5, num_chains=1, disable_progbar=True)
    mcmc.run()
    s = mcmc.get_samples()
    report("MLMGibbs NUTS", digest(s["x"], s["mu"], *[st["x"] for st in g.draw_stats]))

    def discrete_plate():
        z = pyro.sample("z", pdist.Bernoulli(0.3))
        with pyro.plate("seqs", 2):
            x = pyro.sample("x", dist.expand([2]))
        pyro.factor("f", (z * 1.0 - 0.5) * (x == d_id).sum().double())

    g = MLMGibbs(discrete_plate, seed=3)
    mcmc = MCMC(g, num_samples=12, warmup_steps=2, num_chains=1, disable_progbar=True)
    mcmc.run()
    s = mcmc.get_samples()
    report("MLMGibbs discrete + plate", digest(s["x"], s["z"], *[st["x"] for st in g.draw_stats]))


def _cli(*args) -> None:
    from mlm_ppl.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in args])
    if code != 0:
        raise SystemExit(f"mlm-ppl {' '.join(map(str, args))} exited {code}")


def _files(directory: Path, names) -> str:
    return digest(*[(directory / n).read_text() for n in names])


def cli_cases(model_dir: str, tmp: Path) -> None:
    base = ["sample", "--model", model_dir, "--template", TEMPLATE, "--chains", "3", "--draws", "20", "--seed", "7"]
    for kernel, extra in {
        "mh": [],
        "surrogate-mh": ["--inner-steps", "4"],
        "pseudo-gibbs": ["--scan", "left_to_right"],
        "mask-predict": ["--iterations", "3"],
    }.items():
        out = tmp / f"cli-{kernel}"
        _cli(*base, "--kernel", kernel, *extra, "--out", out, "--no-progress")
        report(f"cli {kernel}", _files(out, ["samples.txt", "summary.txt"]))
    templates = tmp / "templates.txt"
    templates.write_text("one\tA[MASK]C[MASK]\ntwo\t[MASK]CC[MASK]A\n")
    out = tmp / "batch"
    _cli("sample", "--model", model_dir, "--templates", templates, "--chains", "2", "--draws", "15", "--seed", "1",
         "--out", out, "--no-progress")  # fmt: skip
    report("cli batch", _files(out, ["designs.tsv", "one/samples.txt", "two/samples.txt"]))


def _netns() -> list[str] | None:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return None
    try:
        import ray  # noqa: F401
    except ModuleNotFoundError:
        return None
    probe = subprocess.run(["unshare", "--net", "sh", "-c", "ip link set lo up"], capture_output=True)
    if probe.returncode != 0:
        return None
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']


def ray_cases(model_dir: str, tmp: Path) -> None:
    prefix = _netns()
    if prefix is None:
        report("cli ray", "skipped")
        report("cli batch ray", "skipped")
        return
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = tmp / "ray"
    cmd = [*prefix, sys.executable, "-m", "mlm_ppl.cli", "sample", "--model", model_dir, "--template", TEMPLATE,
           "--chains", "3", "--draws", "20", "--seed", "7", "--ray", "--workers", "2", "--out", str(out),
           "--no-progress"]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    report("cli ray (= cli mh above)", _files(out, ["samples.txt"]))
    templates = tmp / "templates.txt"
    out = tmp / "batch-ray"
    cmd = [*prefix, sys.executable, "-m", "mlm_ppl.cli", "sample", "--model", model_dir, "--templates",
           str(templates), "--chains", "2", "--draws", "15", "--seed", "1", "--ray", "--workers", "2",
           "--out", str(out), "--no-progress"]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    report("cli batch ray", _files(out, ["designs.tsv", "one/samples.txt", "two/samples.txt"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray cases")
    args = parser.parse_args()
    mlm = testing.tiny_residue_bert("ACDE", seed=1)
    api_cases(mlm)
    pyro_cases(mlm)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model_dir = str(testing.save_tiny(mlm, tmp / "model"))
        cli_cases(model_dir, tmp)
        if args.no_ray:
            report("cli ray", "skipped")
            report("cli batch ray", "skipped")
        else:
            ray_cases(model_dir, tmp)


if __name__ == "__main__":
    main()
