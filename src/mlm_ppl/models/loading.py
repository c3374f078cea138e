"""Loading masked LMs offline: AntiBERTy from its wheel, local directories, the HF cache."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError

from .masked_lm import MaskedLM

__all__ = ["load_mlm", "antiberty_paths", "model_files", "check_model_files", "file_sha256"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def antiberty_paths() -> tuple[Path, Path]:
    """The weights directory and vocabulary file of AntiBERTy as shipped in ``antiberty==0.1.3``.

    Nothing is loaded: :func:`~mlm_ppl.load_mlm` reads these paths for ``"antiberty"``.

    Returns
    -------
    weights_dir : pathlib.Path
        The directory holding the model's ``config.json`` and weights.
    vocab_file : pathlib.Path
        The tokenizer's ``vocab.txt``.

    Raises
    ------
    ModuleNotFoundError
        If the package is not installed, saying how to install it.
    FileNotFoundError
        If the installed package has no weights inside it (only ``antiberty==0.1.3`` ships them
        in the wheel).
    """
    spec = importlib.util.find_spec("antiberty")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the 'antiberty' model needs the antiberty package, which ships its weights: "
            "pip install 'mlm-ppl[antibody]'  (or: pip install antiberty==0.1.3)"
        )
    root = Path(list(spec.submodule_search_locations)[0]) / "trained_models"
    weights, vocab = root / "AntiBERTy_md_smooth", root / "vocab.txt"
    if not (weights / "config.json").is_file() or not vocab.is_file():
        raise FileNotFoundError(
            f"the installed antiberty package has no weights under {root}; only antiberty==0.1.3 ships them "
            "inside the wheel (newer releases download at run time): pip install antiberty==0.1.3"
        )
    return weights, vocab


def load_mlm(
    name_or_path: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    compile: bool = False,
    trust_remote_code: bool = False,
    memory_budget_mb: float | None = None,
) -> MaskedLM:
    """Load a masked language model without touching the network.

    Parameters
    ----------
    name_or_path : str or path
        ``"antiberty"`` (weights shipped in the ``antiberty==0.1.3`` wheel), a local
        directory holding a Hugging Face model and tokenizer, or a model id already in the
        Hugging Face cache (e.g. ``"bert-base-uncased"`` after a download elsewhere).
    device : str or torch.device, optional
        Default CPU. ``"cuda"`` requires a visible GPU.
    dtype : torch.dtype or str, optional
        ``torch.float32`` (default, exact), or ``torch.bfloat16`` / ``"bf16"``: about 3x
        faster on a modern CPU and approximate (AntiBERTy PLL off by about 0.1 nat on 120
        residues; see ``docs/performance.md``).
    compile : bool
        Wrap the encoder in ``torch.compile`` (approximate to float rounding; the first
        calls are slow while it compiles).
    trust_remote_code : bool
        Passed to Hugging Face; off unless you ask.
    memory_budget_mb : float, optional
        Activation budget of one chunk of masked copies, in MB (see :class:`MaskedLM`); default
        None: 64 on the CPU, 2048 on any other device.

    Returns
    -------
    MaskedLM
        The model and its tokenizer, in eval mode on ``device``.

    Raises
    ------
    ValueError, TypeError
        Unknown model, bad device or dtype, a model that is not a masked LM.
    ModuleNotFoundError
        ``"antiberty"`` without the antiberty package installed.
    FileNotFoundError
        ``"antiberty"`` from an antiberty package that holds no weights.

    Examples
    --------
    A saved model loads from its directory (here a tiny random ESM; ``load_mlm("antiberty")``
    loads the real antibody model the same way):

    >>> import tempfile
    >>> from mlm_ppl import load_mlm
    >>> from mlm_ppl.testing import save_tiny, tiny_esm
    >>> directory = save_tiny(tiny_esm(seed=0), tempfile.mkdtemp())
    >>> mlm = load_mlm(directory)
    >>> mlm.score(["ACDEF", "KLMNPQ"]).shape  # one energy per sequence, in nats
    torch.Size([2])
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"name_or_path must be a str or path, got {type(name_or_path).__name__}")
    torch_device = _check_device(device)
    torch_dtype = _check_dtype(dtype)
    name = os.fspath(name_or_path)
    if not name.strip():
        raise ValueError("name_or_path is empty; give 'antiberty', a directory, or a cached model id")
    from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForMaskedLM, BertTokenizer

    kwargs = dict(dtype=torch_dtype)
    residue_level = None
    with _quiet_transformers():
        if name.lower() == "antiberty":
            weights, vocab = antiberty_paths()
            model, info = BertForMaskedLM.from_pretrained(weights, output_loading_info=True, **kwargs)
            tokenizer = BertTokenizer(str(vocab), do_lower_case=False)
            residue_level = True
        else:
            source = _resolve(name)
            try:
                model, info = AutoModelForMaskedLM.from_pretrained(
                    source,
                    local_files_only=True,
                    trust_remote_code=trust_remote_code,
                    output_loading_info=True,
                    **kwargs,
                )
                tokenizer = AutoTokenizer.from_pretrained(
                    source, local_files_only=True, trust_remote_code=trust_remote_code
                )
            except (OSError, ValueError, KeyError, RuntimeError, pickle.UnpicklingError, SafetensorError) as err:
                # a missing or foreign file, truncated safetensors, pickle weights refused by weights_only
                # loading, shapes that do not fit the config: the files, not the library, are at fault
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                if isinstance(err, pickle.UnpicklingError):
                    first = "its weights are a pickle that would run code, refused (convert them to safetensors)"
                raise ValueError(
                    f"could not load {name!r} as a masked LM from {source}: {type(err).__name__}: {first}".rstrip()
                    + "\nIt must hold a model with a masked-LM head (AutoModelForMaskedLM) in safetensors or "
                    "weights-only files, and its tokenizer."
                ) from err
    _check_head(name, info)
    model = model.to(torch_device).eval()
    budget = memory_budget_mb if memory_budget_mb is not None else (64.0 if torch_device.type == "cpu" else 2048.0)
    return MaskedLM(model, tokenizer, name=name, residue_level=residue_level, memory_budget_mb=budget, compile=compile)


# what a model directory is read from: its config, weights (and their index) and tokenizer files,
# and the code of a model that brings its own (trust_remote_code); not training state beside them
_MODEL_FILE = re.compile(
    r"config\.json|.*\.safetensors(\.index\.json)?|pytorch_model.*\.bin(\.index\.json)?"
    r"|tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|.*\.model|.*\.py"
)
_DIGESTS: dict[tuple, str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, in hex (remembered for this process while the file's size,
    modification time and inode stay the same: a run hashes each file once)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(real, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _model_paths(name_or_path: str | os.PathLike) -> tuple[Path, dict[str, Path]]:
    """The model's folder and the files :func:`load_mlm` reads for ``name_or_path``, by name in it."""
    name = os.fspath(name_or_path)
    if name.lower() == "antiberty":
        weights, vocab = antiberty_paths()
        folder, paths = vocab.parent, [p for p in weights.iterdir() if _MODEL_FILE.fullmatch(p.name)] + [vocab]
    else:
        folder = Path(_resolve(name))
        paths = [p for p in folder.iterdir() if _MODEL_FILE.fullmatch(p.name)]
    return folder, {str(p.relative_to(folder)): p for p in sorted(paths) if p.is_file()}


def model_files(name_or_path: str | os.PathLike) -> dict[str, str]:
    """The sha256 of every file :func:`load_mlm` reads for ``name_or_path``, by name: the config,
    weights and tokenizer files of a model directory (or of its Hugging Face cache snapshot);
    AntiBERTy's shipped config, weights and vocabulary. What a run records of its model."""
    return {name: file_sha256(path) for name, path in _model_paths(name_or_path)[1].items()}


def check_model_files(name_or_path: str | os.PathLike, recorded: Mapping[str, str]) -> None:
    """Raise a ValueError naming every file of the model that is not the one ``recorded`` (the
    :func:`model_files` of when the run started): changed, gone or new."""
    folder, paths = _model_paths(name_or_path)
    problems = []
    for name in sorted(set(paths) | set(recorded)):
        if name not in paths:
            problems.append(f"{folder / name} is gone")
        elif name not in recorded:
            problems.append(f"{paths[name]} is new")
        elif (digest := file_sha256(paths[name])) != recorded[name]:
            problems.append(f"{paths[name]} changed (sha256 {recorded[name]} recorded, {digest} now)")
    if problems:
        raise ValueError(
            f"model {os.fspath(name_or_path)!r} is not the model the run started with: {'; '.join(problems)}; "
            "restore the model's files, or start a new run"
        )


def _resolve(name: str) -> str:
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise ValueError(f"{name!r} is a file; give the directory holding config.json and the tokenizer files")
    # Hub ids are "name" or "org/name"; anything else is a path that does not exist.
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name
    if not looks_like_path:
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(name, local_files_only=True, cache_dir=os.environ.get("HF_HUB_CACHE"))
        except Exception:
            pass
    if looks_like_path:
        raise ValueError(f"model directory {name!r} does not exist; give an existing directory or 'antiberty'")
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
    raise ValueError(
        f"model {name!r} not found: it is not 'antiberty', not a local directory, and not in the Hugging Face "
        f"cache ({cache}). mlm-ppl never downloads. On a machine with internet, run "
        f"`huggingface-cli download {name}` (or save_pretrained to a directory) and copy the cache or "
        f"directory here."
    )


def _check_device(device) -> torch.device:
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"invalid device {device!r}: {err}") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r} cannot run a model here; use cpu, cuda or mps")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available here; use device='cpu'")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} requested but MPS is not available here; use device='cpu'")
    return dev


def _check_dtype(dtype) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype (float32, bfloat16, float16), got {dtype}")
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ValueError(f"unknown dtype {dtype!r}; use torch.float32 (default), torch.bfloat16 or torch.float16")


def _check_head(name: str, info: dict) -> None:
    missing = [k for k in info.get("missing_keys", []) if "pooler" not in k]
    if missing:
        warnings.warn(
            f"model {name!r}: {len(missing)} weights were not in the checkpoint and are random "
            f"({', '.join(sorted(missing)[:4])}{' ...' if len(missing) > 4 else ''}); "
            "its masked-LM predictions are not trained",
            UserWarning,
            stacklevel=3,
        )


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' load report and progress bar for the duration of a load."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
