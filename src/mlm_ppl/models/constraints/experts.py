"""Soft experts ``w * f(x)``: the :class:`Expert` type and the built-ins a spec file names by kind."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import numbers
import pickle
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .fields import FieldTypeError, FieldValueError, check_name, check_weight

EXPERT_INPUTS = ("sequences", "designed", "tokens")
"""What an expert's function receives, for ``N`` states:

``"sequences"``
    ``list[str]``, each whole state decoded (:meth:`~mlm_ppl.models.TokenCodec.decode`);
``"designed"``
    ``list[str]``, the tokens at the free positions only, decoded the same way (residues
    without separators, words with spaces);
``"tokens"``
    the ``(N, L)`` long tensor of token ids, special tokens included.

It returns ``N`` finite scores in nats (a list, an array or a tensor).
"""


@dataclass(frozen=True, eq=False)
class Expert:
    """A soft term ``w * f(x)`` of the log density.

    Parameters
    ----------
    name : str
        The expert's name, unique within a spec (the key of its values).
    function : callable
        Maps a batch of states, in the form ``takes`` names (:data:`EXPERT_INPUTS`), to ``N``
        finite scores in nats.
    weight : float, optional
        A finite number (default 1.0); negative weights penalise large scores.
    takes : {"sequences", "designed", "tokens"}, optional
        What ``function`` receives (:data:`EXPERT_INPUTS`); default ``"sequences"``.
    kind : str or None, optional
        How a spec file names the expert (a built-in name or ``"module:function"``); set by the
        built-ins and by :meth:`~mlm_ppl.ConstraintSpec.from_dict`. ``kind=None`` (default)
        derives ``"module:function"`` from a module-level function when the spec is written out.
    params : mapping of str to object, optional
        The parameters the expert was built with (written to a spec file with ``kind``); kept as
        a dict.
    code_digest : str, optional
        For an expert named ``"module:function"``: the digest of its module's code
        (``module_digest``), set when read from a spec and computed when written out; for a
        classifier, of the files its model and tokenizer are read from. A spec read again with
        another digest is refused.

    Raises
    ------
    TypeError
        Where ``name`` is not a string, ``function`` is not callable, or ``weight`` is not a
        number.
    ValueError
        Where ``name`` is blank, ``weight`` is not finite, or ``takes`` is not one of
        :data:`EXPERT_INPUTS`.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import Expert
    >>> count_a = Expert("count-a", lambda sequences: [s.count("A") for s in sequences], weight=0.5)
    >>> count_a.function(["AAC", "CDE"])
    [2, 0]
    """

    name: str
    function: Callable[[Any], Any]
    weight: float = 1.0
    takes: str = "sequences"
    kind: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    code_digest: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "expert")
        if not callable(self.function):
            raise FieldTypeError(f"expert {self.name!r}: function must be callable, got {self.function!r}", "kind")
        object.__setattr__(self, "weight", check_weight(self.name, self.weight))
        if self.takes not in EXPERT_INPUTS:
            raise FieldValueError(
                f"expert {self.name!r}: takes must be one of {', '.join(map(repr, EXPERT_INPUTS))}, got {self.takes!r}",
                "takes",
            )
        object.__setattr__(self, "params", dict(self.params))

    def spec_kind(self) -> str:
        """The expert's ``kind`` in a spec file: its own ``kind``, else its function's ``"module:function"``.

        Returns
        -------
        str
            A built-in kind (:data:`EXPERT_KINDS`) or ``"module:function"``.

        Raises
        ------
        ValueError
            Where the expert has no ``kind`` and its function no spec-file form: a lambda, a
            closure, a ``functools.partial``, a callable object, or any function that importing its
            module and following its qualified name does not give back.

        Examples
        --------
        >>> from mlm_ppl.models.constraints import hydropathy
        >>> hydropathy().spec_kind()
        'hydropathy'
        """
        if self.kind is not None:
            return self.kind
        fn = self.function
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        named = (
            isinstance(module, str)
            and isinstance(qualname, str)
            and module not in ("", "__main__")
            and qualname != ""
            and "<" not in qualname
            and _resolves_to(module, qualname, fn)
        )
        if not named:
            raise ValueError(
                f"expert {self.name!r}: its function {fn!r} has no spec-file form: a spec file names an expert "
                "by a module-level function (kind = 'module:function', with params), not a lambda, closure, "
                "functools.partial or callable object"
            )
        return f"{module}:{qualname}"

    def to_dict(self) -> dict[str, Any]:
        """The expert as a spec file's table.

        Returns
        -------
        dict of str to object
            ``name``, ``kind`` (:meth:`spec_kind`) and ``weight``; for a ``"module:function"``
            kind, ``takes`` and ``code_digest`` (computed now where not set); a classifier's
            ``code_digest``; and ``params`` where there are any.

        Raises
        ------
        ValueError
            Where the expert has no spec-file form (:meth:`spec_kind`), or the module of a
            ``"module:function"`` kind cannot be found.
        """
        kind = self.spec_kind()
        out: dict[str, Any] = {"name": self.name, "kind": kind, "weight": self.weight}
        if ":" in kind:
            out["takes"] = self.takes
            out["code_digest"] = self.code_digest or module_digest(kind.partition(":")[0])
        elif self.code_digest is not None:  # a classifier's files
            out["code_digest"] = self.code_digest
        if self.params:
            out["params"] = dict(self.params)
        return out


KYTE_DOOLITTLE: dict[str, float] = {
    "A": 1.8, "R": -4.5, "N": -3.5, "D": -3.5, "C": 2.5, "Q": -3.5, "E": -3.5, "G": -0.4, "H": -3.2, "I": 4.5,
    "L": 3.8, "K": -3.9, "M": 1.9, "F": 2.8, "P": -1.6, "S": -0.8, "T": -0.7, "W": -0.9, "Y": -1.3, "V": 4.2,
}  # fmt: skip
"""Kyte & Doolittle (1982) hydropathy index of the 20 standard amino acids."""

_REGIONS = {"designed": "designed", "sequence": "sequences"}


def _region(name: str, region: Any) -> str:
    if region not in _REGIONS:
        raise FieldValueError(
            f"expert {name!r}: region must be 'designed' or 'sequence', got {region!r}", "params.region"
        )
    return _REGIONS[region]


def _residues(text: str) -> str:
    return text.replace(" ", "")


def hydropathy(*, name: str = "hydropathy", weight: float = 1.0, region: str = "designed") -> Expert:
    """Make an expert scoring the mean Kyte-Doolittle hydropathy (:data:`KYTE_DOOLITTLE`) per residue.

    Characters outside the 20 standard amino acids (``X``, ``B`` ...) count as 0 and are included
    in the mean (spaces are not). A negative weight favours hydrophilic designs.

    Parameters
    ----------
    name : str, optional
        The expert's name (default ``"hydropathy"``).
    weight : float, optional
        Nats per unit of mean hydropathy (default 1.0).
    region : {"designed", "sequence"}, optional
        ``"designed"`` (default) averages over the free positions, ``"sequence"`` over the whole
        decoded sequence.

    Returns
    -------
    Expert
        Of kind ``"hydropathy"``.

    Raises
    ------
    ValueError
        Where ``region`` is neither ``"designed"`` nor ``"sequence"``.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import hydropathy
    >>> expert = hydropathy(weight=-0.5)
    >>> lysine_aspartate, isoleucine_valine = expert.function(["KD", "IV"])
    >>> lysine_aspartate < 0 < isoleucine_valine
    True
    """
    takes = _region(name, region)

    def mean_hydropathy(sequences: list[str]) -> list[float]:
        out = []
        for s in sequences:
            res = _residues(s)
            out.append(sum(KYTE_DOOLITTLE.get(c, 0.0) for c in res) / len(res) if res else 0.0)
        return out

    return Expert(name, mean_hydropathy, weight, takes, kind="hydropathy", params={"region": region})


def net_charge(
    *, name: str = "net-charge", weight: float = 1.0, region: str = "sequence", histidine: float = 0.0
) -> Expert:
    """Make an expert scoring net charge by residue counts: K and R count +1, D and E -1, H counts ``histidine``.

    Histidine's side chain (pKa about 6) is mostly neutral at pH 7.4, hence the default 0;
    give e.g. 0.1 (its charged fraction near pH 7) or 1.0 (below pH 6) to count it. Termini are
    not counted.

    Parameters
    ----------
    name : str, optional
        The expert's name (default ``"net-charge"``).
    weight : float, optional
        Nats per unit of charge (default 1.0).
    region : {"sequence", "designed"}, optional
        As for :func:`hydropathy`; default ``"sequence"``, the whole decoded sequence.
    histidine : float, optional
        The charge a histidine counts (default 0.0).

    Returns
    -------
    Expert
        Of kind ``"net-charge"``.

    Raises
    ------
    ValueError
        Where ``region`` is neither ``"designed"`` nor ``"sequence"``.
    TypeError
        Where ``histidine`` is not a finite number.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import net_charge
    >>> net_charge().function(["KKDE", "RRH"])
    [0.0, 2.0]
    >>> net_charge(histidine=1.0).function(["RRH"])
    [3.0]
    """
    takes = _region(name, region)
    if isinstance(histidine, bool) or not isinstance(histidine, numbers.Real) or not math.isfinite(histidine):
        raise FieldTypeError(
            f"expert {name!r}: histidine must be a finite number, got {histidine!r}", "params.histidine"
        )
    charge = {"K": 1.0, "R": 1.0, "D": -1.0, "E": -1.0, "H": float(histidine)}

    def charge_of(sequences: list[str]) -> list[float]:
        return [sum(charge.get(c, 0.0) for c in s) for s in sequences]

    params = {"region": region, "histidine": float(histidine)}
    return Expert(name, charge_of, weight, takes, kind="net-charge", params=params)


def residue_count(
    residues: str, *, name: str = "residue-count", weight: float = 1.0, region: str = "designed"
) -> Expert:
    """Make an expert counting the residues that are any of ``residues`` (e.g. ``"MW"``).

    Parameters
    ----------
    residues : str
        The residues counted, one character each (spaces ignored).
    name : str, optional
        The expert's name (default ``"residue-count"``).
    weight : float, optional
        Nats per residue counted (default 1.0).
    region : {"designed", "sequence"}, optional
        As for :func:`hydropathy`; default ``"designed"``, the free positions only.

    Returns
    -------
    Expert
        Of kind ``"residue-count"``.

    Raises
    ------
    ValueError
        Where ``region`` is neither ``"designed"`` nor ``"sequence"``.
    TypeError
        Where ``residues`` is not a string with at least one residue.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import residue_count
    >>> residue_count("MW", weight=-1.0).function(["AMWM", "ACDE"])
    [3.0, 0.0]
    """
    takes = _region(name, region)
    if not isinstance(residues, str) or not _residues(residues):
        raise FieldTypeError(
            f"expert {name!r}: residues must be a non-empty string such as 'MW', got {residues!r}", "params.residues"
        )
    chosen = frozenset(_residues(residues))

    def count(sequences: list[str]) -> list[float]:
        return [float(sum(c in chosen for c in s)) for s in sequences]

    return Expert(name, count, weight, takes, kind="residue-count", params={"residues": residues, "region": region})


def keyword_count(
    keywords: Sequence[str], *, name: str = "keywords", weight: float = 1.0, case_sensitive: bool = False
) -> Expert:
    """Make an expert counting how many times the keywords occur as whole words in the decoded text (text models).

    A keyword matches where it is not preceded or followed by a letter, digit or underscore;
    overlapping keywords are counted once per non-overlapping match, longest keyword first.

    Parameters
    ----------
    keywords : sequence of str
        The words counted (surrounding spaces stripped); a single string is refused.
    name : str, optional
        The expert's name (default ``"keywords"``).
    weight : float, optional
        Nats per occurrence (default 1.0).
    case_sensitive : bool, optional
        Whether case must match (default False).

    Returns
    -------
    Expert
        Of kind ``"keyword-count"``, reading the whole decoded sequence.

    Raises
    ------
    TypeError
        Where ``keywords`` is not a non-empty sequence of non-blank strings, or ``case_sensitive``
        is not a bool.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import keyword_count
    >>> keyword_count(["cat", "dog"]).function(["the Cat and the dog", "a category"])
    [2.0, 0.0]
    """
    if isinstance(keywords, str) or not isinstance(keywords, Sequence) or not keywords:
        raise FieldTypeError(
            f"expert {name!r}: keywords must be a non-empty list of words, got {keywords!r}", "params.keywords"
        )
    if not all(isinstance(k, str) and k.strip() for k in keywords):
        raise FieldTypeError(
            f"expert {name!r}: keywords must be non-empty strings, got {keywords!r}", "params.keywords"
        )
    if not isinstance(case_sensitive, bool):
        raise FieldTypeError(f"expert {name!r}: case_sensitive must be true or false", "params.case_sensitive")
    alternatives = "|".join(re.escape(k.strip()) for k in sorted(keywords, key=len, reverse=True))
    regex = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", 0 if case_sensitive else re.IGNORECASE)

    def count(sequences: list[str]) -> list[float]:
        return [float(len(regex.findall(s))) for s in sequences]

    params = {"keywords": list(keywords), "case_sensitive": case_sensitive}
    return Expert(name, count, weight, "sequences", kind="keyword-count", params=params)


def hamming_distance(source: str, *, name: str = "hamming", weight: float = 1.0, unit: str = "residue") -> Expert:
    """Make an expert scoring the Hamming distance of the decoded sequence to ``source``.

    Units are compared in order; a difference in length counts one per missing unit. Give a
    negative weight to keep designs near the source.

    Parameters
    ----------
    source : str
        The sequence distances are measured from (the whole sequence, not the designed loop).
    name : str, optional
        The expert's name (default ``"hamming"``).
    weight : float, optional
        Nats per unit of distance (default 1.0).
    unit : {"residue", "word"}, optional
        ``"residue"`` (default) compares characters (spaces ignored), ``"word"``
        whitespace-separated words.

    Returns
    -------
    Expert
        Of kind ``"hamming"``.

    Raises
    ------
    TypeError
        Where ``source`` is not a non-blank string.
    ValueError
        Where ``unit`` is neither ``"residue"`` nor ``"word"``.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import hamming_distance
    >>> hamming_distance("ACDE", weight=-1.0).function(["ACDD", "AC"])
    [1.0, 2.0]
    """
    if not isinstance(source, str) or not source.strip():
        raise FieldTypeError(f"expert {name!r}: source must be a non-empty string, got {source!r}", "params.source")
    if unit not in ("residue", "word"):
        raise FieldValueError(f"expert {name!r}: unit must be 'residue' or 'word', got {unit!r}", "params.unit")

    def units(text: str) -> Sequence[str]:
        return _residues(text) if unit == "residue" else text.split()

    ref = units(source)

    def distance(sequences: list[str]) -> list[float]:
        out = []
        for s in sequences:
            u = units(s)
            out.append(float(sum(a != b for a, b in zip(u, ref)) + abs(len(u) - len(ref))))
        return out

    return Expert(name, distance, weight, "sequences", kind="hamming", params={"source": source, "unit": unit})


def classifier_log_prob(
    path: str | Path,
    label: int | str,
    *,
    name: str = "classifier",
    weight: float = 1.0,
    spaced: bool = False,
    batch_size: int = 32,
) -> Expert:
    """Make an expert scoring ``log p(label | sequence)`` by a Hugging Face sequence classifier saved locally.

    The model (``AutoModelForSequenceClassification``) and its tokenizer (``AutoTokenizer``) load
    from ``path`` with ``local_files_only=True``: nothing is downloaded. The model runs on its
    device, ``batch_size`` sequences at a time, without gradients, on the whole decoded sequence.

    Parameters
    ----------
    path : str or path
        The directory holding the classifier and its tokenizer.
    label : int or str
        A class index or a name of ``config.label2id``.
    name : str, optional
        The expert's name (default ``"classifier"``).
    weight : float, optional
        The weight of the log-probability (default 1.0).
    spaced : bool, optional
        True puts a space between residues, for protein classifiers whose tokenizers expect
        ``"E V Q L"`` (default False).
    batch_size : int, optional
        Sequences per forward pass (default 32).

    Returns
    -------
    Expert
        Of kind ``"classifier"``, whose ``code_digest`` is the digest of the files the model and
        tokenizer are read from.

    Raises
    ------
    TypeError
        Where ``spaced`` is not a bool, or ``label`` is neither an int nor a str.
    ValueError
        Where ``batch_size`` is not an integer >= 1, ``path`` is not a directory, no sequence
        classifier loads from it (a missing or foreign file, or pickle weights, refused), or
        ``label`` is not one of the classifier's classes.

    Examples
    --------
    A random two-class classifier over the tiny BERT's vocabulary, saved and read back:

    >>> import tempfile
    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> from mlm_ppl.models.constraints import classifier_log_prob
    >>> from mlm_ppl.testing import tiny_bert
    >>> tokenizer, directory = tiny_bert().tokenizer, tempfile.mkdtemp()
    >>> config = BertConfig(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1, num_attention_heads=1)
    >>> BertForSequenceClassification(config).save_pretrained(directory)
    >>> _ = tokenizer.save_pretrained(directory)
    >>> classifier_log_prob(directory, 1, name="positive").function(["the cat sat", "a dog ran"]).shape
    torch.Size([2])
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if not isinstance(spaced, bool):
        raise FieldTypeError(f"expert {name!r}: spaced must be true or false", "params.spaced")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise FieldValueError(f"expert {name!r}: batch_size must be an integer >= 1", "params.batch_size")
    directory = Path(path)
    if not directory.is_dir():
        raise FieldValueError(f"expert {name!r}: classifier directory {str(directory)!r} does not exist", "params.path")
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(directory, local_files_only=True).eval()
    except (OSError, ValueError, KeyError, RuntimeError, pickle.UnpicklingError, SafetensorError) as err:
        # a missing or foreign file, pickle weights refused by weights-only loading (no code runs)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if isinstance(err, pickle.UnpicklingError):
            first = "its weights are a pickle that would run code, refused (convert them to safetensors)"
        raise FieldValueError(
            f"expert {name!r}: no sequence classifier loads from {str(directory)!r}: {first}", "params.path"
        ) from None
    num_labels = int(model.config.num_labels)
    label2id = {str(k): int(v) for k, v in (model.config.label2id or {}).items()}
    if isinstance(label, bool) or not isinstance(label, (int, str)):
        raise FieldTypeError(f"expert {name!r}: label must be a class index or name, got {label!r}", "params.label")
    if isinstance(label, str):
        if label not in label2id:
            raise FieldValueError(
                f"expert {name!r}: label {label!r} is not one of the classifier's {sorted(label2id)}", "params.label"
            )
        index = label2id[label]
    else:
        if not 0 <= label < num_labels:
            raise FieldValueError(
                f"expert {name!r}: label {label} is out of range for {num_labels} classes", "params.label"
            )
        index = label
    device = next(model.parameters()).device

    def log_prob(sequences: list[str]) -> Tensor:
        texts = [" ".join(_residues(s)) if spaced else s for s in sequences]
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                enc = tokenizer(texts[start : start + batch_size], padding=True, truncation=True, return_tensors="pt")
                logits = model(**{k: v.to(device) for k, v in enc.items()}).logits
                out.append(torch.log_softmax(logits.double(), dim=-1)[:, index].cpu())
        return torch.cat(out)

    params = {"path": str(path), "label": label, "spaced": spaced, "batch_size": batch_size}
    from ..loading import model_files  # the files it read, hashed as a run's MLM's are: its record holds them

    files = model_files(directory)
    digest = "sha256:" + hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in sorted(files.items())).encode()).hexdigest()
    return Expert(name, log_prob, weight, "sequences", kind="classifier", params=params, code_digest=digest)


EXPERT_KINDS: dict[str, Callable[..., Expert]] = {
    "hydropathy": hydropathy,
    "net-charge": net_charge,
    "residue-count": residue_count,
    "keyword-count": keyword_count,
    "hamming": hamming_distance,
    "classifier": classifier_log_prob,
}
"""The built-in experts by the ``kind`` a spec file gives; each takes ``name``, ``weight`` and its
own parameters (``params``)."""


def _resolves_to(module: str, qualname: str, fn: Any) -> bool:
    """Whether importing ``module`` and following the dotted ``qualname`` gives ``fn`` itself."""
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # no such module or attribute, or the module fails to import: no file form
        return False
    return obj is fn


def module_digest(module_name: str, legacy: bool = False) -> str:
    """``sha256:<hex>`` of the code of module ``module_name`` (what a code expert's record holds),
    found without running the module when it is not imported yet: its source file where it is
    installed (the standard library, site-packages: versioned by the environment), else, for the
    user's own code, every ``.py`` file of its package (its top-level package's tree) or, for a
    module on its own, of its directory (the first :data:`MAX_CODE_FILES`), so that a helper module
    it imports from there is covered (and an edit to any other script there is seen as a change).
    ``legacy``: the source file alone (what records before 0.7 hold). ``builtin:<name>`` for a
    module without a file (compiled into Python). A ValueError when there is no such module."""
    module = sys.modules.get(module_name)
    if module is not None:
        path = getattr(module, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError) as err:
            raise FieldValueError(f"cannot find module {module_name!r}: {err}", "kind") from None
        if spec is None:
            raise FieldValueError(f"cannot import module {module_name!r}: no such module", "kind")
        path = spec.origin if spec.has_location else None
    if not path:
        return f"builtin:{module_name}"
    source = Path(path)
    if legacy or _installed(source):
        return "sha256:" + hashlib.sha256(source.read_bytes()).hexdigest()
    root = source.parent
    while (root / "__init__.py").is_file() and (root.parent / "__init__.py").is_file():
        root = root.parent  # up to the top-level package
    found = root.rglob("*.py") if (root / "__init__.py").is_file() else root.glob("*.py")
    files = sorted(f for f in found if f.is_file())  # regular files (a FIFO named x.py would block the read)
    digest = hashlib.sha256()
    for file in files[:MAX_CODE_FILES]:
        digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return "sha256:" + digest.hexdigest()


MAX_CODE_FILES = 2000
"""At most this many ``.py`` files of a user's directory enter a code expert's digest."""


def _installed(path: Path) -> bool:
    """Whether ``path`` is in the standard library or an installed package (not the user's own files)."""
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    resolved = path.resolve()
    return any(Path(r).resolve() in resolved.parents for r in roots if r)
