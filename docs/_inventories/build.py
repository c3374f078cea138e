"""Write the intersphinx inventories the site links out with (``python build.py``, in this folder).

The machines this project is built on have no network, so Sphinx cannot fetch each project's
``objects.inv``. These inventories list the objects of Python, PyTorch, Pyro, ArviZ,
transformers, NumPy, pandas and Biopython that mlm-ppl's pages and signatures name, each with its page on that
project's site (the address in docs/conf.py's ``intersphinx_mapping`` plus the path below),
under the names code uses and the names autodoc writes (a class's defining module). A name
missing here is shown as plain text, not as a broken link. Add a line and rerun to link another.
"""

from __future__ import annotations

import zlib
from pathlib import Path

# project -> [(name, role, path on the site with its anchor)]; "$" in a path is the name itself
OBJECTS: dict[str, list[tuple[str, str, str]]] = {
    "python": [
        ("pathlib.Path", "class", "library/pathlib.html#$"),
        ("os.PathLike", "class", "library/os.html#$"),
        ("collections.abc.Callable", "class", "library/collections.abc.html#$"),
        ("collections.abc.Iterable", "class", "library/collections.abc.html#$"),
        ("collections.abc.Iterator", "class", "library/collections.abc.html#$"),
        ("collections.abc.Mapping", "class", "library/collections.abc.html#$"),
        ("collections.abc.Sequence", "class", "library/collections.abc.html#$"),
        ("typing.Any", "data", "library/typing.html#$"),
        ("int", "class", "library/functions.html#$"),
        ("float", "class", "library/functions.html#$"),
        ("str", "class", "library/stdtypes.html#$"),
        ("bool", "class", "library/functions.html#$"),
        ("dict", "class", "library/stdtypes.html#$"),
        ("list", "class", "library/stdtypes.html#$"),
        ("tuple", "class", "library/stdtypes.html#$"),
        ("random.Random", "class", "library/random.html#$"),
        ("dataclasses.Field", "class", "library/dataclasses.html#$"),
        ("ValueError", "exception", "library/exceptions.html#$"),
        ("TypeError", "exception", "library/exceptions.html#$"),
        ("RuntimeError", "exception", "library/exceptions.html#$"),
        ("OSError", "exception", "library/exceptions.html#$"),
        ("KeyboardInterrupt", "exception", "library/exceptions.html#$"),
        ("Warning", "exception", "library/exceptions.html#$"),
        ("UserWarning", "exception", "library/exceptions.html#$"),
    ],
    "torch": [
        ("torch.Tensor", "class", "tensors.html#$"),
        ("torch.dtype", "class", "tensor_attributes.html#$"),
        ("torch.device", "class", "tensor_attributes.html#$"),
        ("torch.Size", "class", "size.html#$"),
        ("torch.Generator", "class", "generated/torch.Generator.html#$"),
        ("torch.nn.Module", "class", "generated/torch.nn.Module.html#$"),
        ("torch.distributions.categorical.Categorical", "class", "distributions.html#$"),
        ("torch.distributions.Categorical", "class", "distributions.html#torch.distributions.categorical.Categorical"),
        ("torch.distributions.distribution.Distribution", "class", "distributions.html#$"),
        ("torch.distributions.distribution.Distribution.batch_shape", "attribute", "distributions.html#$"),
        ("torch.distributions.distribution.Distribution.event_shape", "attribute", "distributions.html#$"),
        ("torch.distributions.constraints.Constraint", "class", "distributions.html#$"),
    ],
    "pyro": [
        ("pyro.infer.mcmc.api.MCMC", "class", "mcmc.html#$"),
        ("pyro.infer.MCMC", "class", "mcmc.html#pyro.infer.mcmc.api.MCMC"),
        ("pyro.infer.mcmc.MCMC", "class", "mcmc.html#pyro.infer.mcmc.api.MCMC"),
        ("pyro.infer.mcmc.mcmc_kernel.MCMCKernel", "class", "mcmc.html#$"),
        ("pyro.infer.mcmc.MCMCKernel", "class", "mcmc.html#pyro.infer.mcmc.mcmc_kernel.MCMCKernel"),
        ("pyro.infer.mcmc.NUTS", "class", "mcmc.html#$"),
        ("pyro.infer.NUTS", "class", "mcmc.html#pyro.infer.mcmc.NUTS"),
        ("pyro.infer.mcmc.nuts.NUTS", "class", "mcmc.html#pyro.infer.mcmc.NUTS"),
        ("pyro.infer.mcmc.HMC", "class", "mcmc.html#$"),
        ("pyro.infer.HMC", "class", "mcmc.html#pyro.infer.mcmc.HMC"),
        ("pyro.distributions.Categorical", "class", "distributions.html#$"),
        ("pyro.distributions.torch.Categorical", "class", "distributions.html#pyro.distributions.Categorical"),
        ("pyro.primitives.enable_validation", "function", "primitives.html#$"),
        ("pyro.enable_validation", "function", "primitives.html#pyro.primitives.enable_validation"),
        ("pyro.distributions.Distribution", "class", "distributions.html#$"),
        ("pyro.distributions.TorchDistribution", "class", "distributions.html#$"),
        (
            "pyro.distributions.torch_distribution.TorchDistribution",
            "class",
            "distributions.html#pyro.distributions.TorchDistribution",
        ),
        ("pyro.primitives.sample", "function", "primitives.html#$"),
        ("pyro.sample", "function", "primitives.html#pyro.primitives.sample"),
        ("pyro.primitives.factor", "function", "primitives.html#$"),
        ("pyro.factor", "function", "primitives.html#pyro.primitives.factor"),
        ("pyro.primitives.plate", "class", "primitives.html#$"),
        ("pyro.plate", "class", "primitives.html#pyro.primitives.plate"),
    ],
    "arviz": [
        ("arviz.InferenceData", "class", "api/generated/arviz.InferenceData.html#$"),
        (
            "arviz.data.inference_data.InferenceData",
            "class",
            "api/generated/arviz.InferenceData.html#arviz.InferenceData",
        ),
        ("arviz.rhat", "function", "api/generated/arviz.rhat.html#$"),
        ("arviz.ess", "function", "api/generated/arviz.ess.html#$"),
        ("arviz.mcse", "function", "api/generated/arviz.mcse.html#$"),
        ("arviz.summary", "function", "api/generated/arviz.summary.html#$"),
        ("arviz.plot_trace", "function", "api/generated/arviz.plot_trace.html#$"),
        ("arviz.plot_rank", "function", "api/generated/arviz.plot_rank.html#$"),
    ],
    "transformers": [
        ("transformers.PreTrainedModel", "class", "main_classes/model#$"),
        ("transformers.modeling_utils.PreTrainedModel", "class", "main_classes/model#transformers.PreTrainedModel"),
        ("transformers.PreTrainedTokenizerBase", "class", "main_classes/tokenizer#$"),
        (
            "transformers.tokenization_utils_base.PreTrainedTokenizerBase",
            "class",
            "main_classes/tokenizer#transformers.PreTrainedTokenizerBase",
        ),
        ("transformers.AutoModelForMaskedLM", "class", "model_doc/auto#$"),
    ],
    "biopython": [
        ("Bio.Align.PairwiseAligner", "class", "Bio.Align.html#$"),
    ],
    "pandas": [
        ("pandas.DataFrame", "class", "reference/api/pandas.DataFrame.html#$"),
    ],
    "numpy": [
        ("numpy.ndarray", "class", "reference/generated/numpy.ndarray.html#$"),
        ("numpy.random.Generator", "class", "reference/random/generator.html#$"),
    ],
}


def inventory(project: str, objects: list[tuple[str, str, str]]) -> bytes:
    """An ``objects.inv`` (Sphinx's version 2 format) of ``objects``."""
    header = f"# Sphinx inventory version 2\n# Project: {project}\n# Version: \n"
    header += "# The remainder of this file is compressed using zlib.\n"
    lines = "".join(f"{name} py:{role} 1 {path} -\n" for name, role, path in objects)
    return header.encode() + zlib.compress(lines.encode())


def main() -> None:
    here = Path(__file__).resolve().parent
    for project, objects in OBJECTS.items():
        (here / f"{project}.inv").write_bytes(inventory(project, objects))


if __name__ == "__main__":
    main()
