"""Surrogate-transition MH against exact enumeration: exact for the target whatever the surrogate."""

import pytest
import torch

from exactness import after, check_fit, empirical, invariance_error
from mlm_ppl import MaskedLMDistribution, SurrogateMH, sample
from mlm_ppl.inference import ChainStreams, MetropolisHastings, exact, make_kernel, run_chains, step_stats
from mlm_ppl.models import ConstrainedTarget
from mlm_ppl.testing import goyal_counterexample

LONG = "AC[MASK]D[MASK]EA[MASK]C"  # 3 free positions among fixed ones: windows 0, 1, 2 differ


def _factor(mlm, dist):
    a = mlm.vocab.index("A")
    return lambda x: torch.where(x[:, dist.free_positions[0]] == a, 0.0, -1.5).to(torch.float64)


@pytest.mark.parametrize(
    "window, context, frame",
    [
        (0, None, "crop"),
        (1, None, "crop"),
        (0, 0, "crop"),
        (0, 1, "crop"),
        (1, 1, "crop"),
        (0, 0, "frozen"),
        (1, 1, "frozen"),
    ],
)
@pytest.mark.parametrize("surrogate_dtype", [None, "float32", "bfloat16"])
@pytest.mark.parametrize("with_factor", [False, True], ids=["bare", "factor"])
def test_surrogate_mh_leaves_the_target_invariant(tiny4_64, window, context, frame, surrogate_dtype, with_factor):
    """The exact one-step matrix (the inner chain's K-step matrix on the surrogate, corrected by the
    outer acceptance) has the target as its stationary law, to rounding, although the surrogate's own
    law is far from it: also with the copies cropped to the free positions (context 0: 5 of 11
    columns) or to their neighbours (context 1: 10 of 11), and with the rest of the sequence frozen."""
    dist = MaskedLMDistribution(tiny4_64, LONG, temperature=0.8)
    target = ConstrainedTarget(dist, _factor(tiny4_64, dist)) if with_factor else dist
    kernel = SurrogateMH(
        target,
        surrogate_window=window,
        surrogate_dtype=surrogate_dtype,
        surrogate_context=context,
        surrogate_frame=frame,
        inner_steps=3,
        top_k=3,
    )
    pi = exact.exact_log_probs(target).exp()
    surrogate = exact.exact_log_probs(kernel.surrogate).exp()
    assert exact.total_variation(surrogate, pi) > 0.03  # a poor surrogate: the correction does the work
    assert kernel.surrogate.positions.numel() == (3 if window == 0 else 8)
    assert kernel.surrogate.columns.numel() == {None: 11, 0: 5, 1: 10}[context]
    assert invariance_error(kernel, pi) < 1e-10


@pytest.mark.parametrize(
    "context, frame, surrogate_dtype",
    [(None, "crop", None), (0, "crop", "float32"), (0, "frozen", None), (1, "frozen", "bfloat16")],
)
@pytest.mark.parametrize(
    "inner",
    [dict(p_unmask=1.0), dict(p_unmask=0.5, unmask_size=2, block_size=2)],
    ids=["unmask", "unmask_runs_and_blocks"],
)
@pytest.mark.parametrize("with_factor", [False, True], ids=["bare", "factor"])
def test_surrogate_mh_with_unmask_and_block_moves_leaves_the_target_invariant(
    tiny4_64, context, frame, surrogate_dtype, inner, with_factor
):
    """An inner chain of unmask proposals (and blocks), read from the surrogate's own copies (cropped,
    frozen, in another dtype), is reversible for the surrogate, so the corrected step is exact."""
    dist = MaskedLMDistribution(tiny4_64, LONG, temperature=0.8)
    target = ConstrainedTarget(dist, _factor(tiny4_64, dist)) if with_factor else dist
    kernel = SurrogateMH(
        target,
        surrogate_context=context,
        surrogate_frame=frame,
        surrogate_dtype=surrogate_dtype,
        inner_steps=2,
        **inner,
    )
    pi = exact.exact_log_probs(target).exp()
    # a block proposal read from a float32/bfloat16 copy sums to 1 over its fills only to float32 rounding
    # (the unmask proposal is normalised in float64), so its matrix rows are off by ~1e-8
    rounding = 1e-7 if surrogate_dtype is not None and inner.get("block_size", 1) > 1 else 1e-10
    assert invariance_error(kernel, pi) < rounding
    sur = exact.exact_log_probs(kernel.surrogate).exp()
    Q = exact.transition_matrix(kernel.inner)
    assert float((sur @ Q - sur).abs().max()) < rounding  # the inner chain is exact for the surrogate
    flow = sur[:, None] * Q
    assert float((flow - flow.T).abs().max()) < rounding  # and reversible: what the outer step needs


@pytest.mark.parametrize("context, frame", [(None, "crop"), (0, "crop"), (1, "frozen")])
def test_the_surrogate_reads_its_proposals_from_its_own_copies(tiny4, context, frame):
    """site_logits of the surrogate target: one free position masked, it gives the conditionals its
    evaluation gives there (the same crop, frame and dtype); a block masks its positions together."""
    dist = MaskedLMDistribution(tiny4, LONG)
    kernel = SurrogateMH(dist, surrogate_context=context, surrogate_frame=frame, surrogate_dtype="bfloat16")
    sur = kernel.surrogate
    tokens = run_chains(MetropolisHastings(dist), 3, 1, seed=0).tokens[:, 0]
    ev = sur.evaluate(tokens)
    for j, p in enumerate(dist.free_positions.tolist()):
        single = sur.site_logits(tokens, torch.full((3, 1), p))[:, 0]
        assert torch.allclose(single, ev.cond_logits[:, j], atol=1e-5)
    block = sur.site_logits(tokens, dist.free_positions.expand(3, -1))
    assert not torch.allclose(block, ev.cond_logits, atol=1e-3)  # the others masked too: other conditionals
    if context is None:  # the whole copy: the model's own block read, in the surrogate's dtype
        whole = tiny4.cast(torch.bfloat16).block_logits(tokens, dist.free_positions.expand(3, -1))
        assert torch.allclose(block, whole, atol=1e-5)


def test_a_cropped_copy_reads_each_token_at_its_own_position(tiny_models):
    """The crop keeps the columns within R of a free position and the special tokens, and reads them
    at the ids the model gives them in the whole sequence (BERT: the column; RoBERTa, ESM: past the
    padding index): one copy's logits equal the model's on the cropped ids at those ids, and differ
    from the model's on the cropped ids at their new places (for absolute positions)."""
    for name, (mlm, inputs) in tiny_models.items():
        whole = mlm.encode(inputs[:1])
        T = int(whole.lengths[0])
        ids = whole.input_ids[:, :T]
        query = torch.arange(1, T - 1)[None]
        own = mlm.logits_at(ids, torch.ones_like(ids), query)
        explicit = mlm.logits_at(ids, torch.ones_like(ids), query, position_ids=mlm.position_ids(torch.arange(T))[None])
        assert torch.allclose(own, explicit, atol=1e-5), name  # the ids the model uses itself

        free = torch.tensor([T // 2])
        columns = torch.tensor([0, *range(int(free) - 1, int(free) + 2), T - 1])  # context 1, and the specials
        crop = ids[:, columns].clone()
        crop[0, 2] = mlm.mask_id
        at_place = mlm.logits_at(
            crop, torch.ones_like(crop), torch.tensor([[2]]), position_ids=mlm.position_ids(columns)[None]
        )
        moved = mlm.logits_at(crop, torch.ones_like(crop), torch.tensor([[2]]))
        dist = MaskedLMDistribution(mlm, ids[0].masked_fill(torch.arange(T) == free, mlm.mask_id))
        assert torch.equal(dist.context_columns(1), columns), name
        ev = dist.evaluate(ids, free, context=1)
        assert torch.allclose(ev.cond_logits[0, 0], at_place[0, 0], atol=1e-5), name
        if name != "esm":  # rotary positions: only distances count, and the crop keeps those near the free one
            assert not torch.allclose(at_place, moved, atol=1e-3), name


def test_the_invariance_check_has_power(tiny4_64):
    """Without the outer correction (the inner chain alone) the same check fails: it samples p~."""
    dist = MaskedLMDistribution(tiny4_64, LONG)
    kernel = SurrogateMH(dist, inner_steps=3)
    pi = exact.exact_log_probs(dist).exp()
    Q = torch.linalg.matrix_power(exact.transition_matrix(kernel.inner), 3)
    assert float((pi @ Q - pi).abs().max()) > 1e-3
    sur = exact.exact_log_probs(kernel.surrogate).exp()
    assert float((sur @ Q - sur).abs().max()) < 1e-10  # the inner chain is exact for its own target


@pytest.mark.slow
def test_the_sampling_code_follows_the_exact_matrix_before_and_after_mixing(tiny4):
    """3000 independent chains from uniform starts: after 1 step (far from the target) and after 12
    (at it), their states follow p0 P^n, P built from the kernel's own code by enumeration."""
    dist = MaskedLMDistribution(tiny4, LONG, temperature=3.0)  # TV to the target 0.25 after 1 step, 0.004 after 12
    kernel = SurrogateMH(dist, surrogate_window=0, inner_steps=3, proposal_temperature=3.0)
    pi = exact.exact_log_probs(dist).exp()
    p1 = after(kernel, 1)
    assert exact.total_variation(p1, pi) > 0.05  # not mixed after one step
    one = run_chains(kernel, 3000, 1, seed=5, init="uniform")
    check_fit(p1, empirical(dist, one.tokens[:, 0]))
    p12 = after(kernel, 12)
    assert exact.total_variation(p12, pi) < 0.01
    run = run_chains(kernel, 3000, 1, warmup_steps=11, seed=6, init="uniform")
    check_fit(pi, empirical(dist, run.tokens[:, 0]), offset=exact.total_variation(p12, pi))


@pytest.mark.parametrize("inner", [{}, dict(p_unmask=0.5, block_size=2)], ids=["single_sites", "unmask_and_blocks"])
def test_statistics_and_cost(tiny4, monkeypatch, inner):
    """masked_copies counts the copies really run (the inner proposals' own reads included);
    n_moves counts an accepted move's inner changes; plain MH reports n_moves = n_changed."""
    dist = MaskedLMDistribution(tiny4, LONG)
    kernel = SurrogateMH(dist, surrogate_window=0, inner_steps=4, **inner)
    state = kernel.init(run_chains(MetropolisHastings(dist), 5, 1, seed=0).tokens[:, 0])
    rows = []
    real = tiny4.logits_at
    monkeypatch.setattr(tiny4, "logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real(ids, attn, q))
    gen = ChainStreams(2, 5)
    moved_any = False
    for _ in range(12):
        rows.clear()
        before = state.tokens
        state, info = kernel.step(state, gen)
        assert sum(rows) == int(info.masked_copies.sum())
        stats = step_stats(info)
        assert set(stats) >= {"n_moves", "inner_acceptance", "masked_copies"}
        assert torch.equal(info.n_changed, (state.tokens != before).sum(-1))
        assert ((info.n_moves >= info.n_changed) | ~info.is_accepted).all()
        assert (info.n_moves[~info.is_accepted] == 0).all()
        assert ((0 <= info.inner_acceptance) & (info.inner_acceptance <= 1)).all()
        moved_any |= bool((info.n_moves > 0).any())
    assert moved_any
    # the cached energies are those of the final tokens, under the target and the surrogate
    fresh, fresh_sur = dist.evaluate(state.tokens), kernel.surrogate.evaluate(state.tokens)
    assert torch.allclose(state.energy, fresh.energy, atol=1e-5)
    assert torch.allclose(state.inner.energy, fresh_sur.energy, atol=1e-5)
    assert torch.allclose(state.inner.cond_logits, fresh_sur.cond_logits, atol=1e-5)
    mh = MetropolisHastings(dist)
    _, mh_info = mh.step(mh.init(state.tokens), gen)
    assert torch.equal(step_stats(mh_info)["n_moves"], mh_info.n_changed)


def test_runs_record_the_new_statistics_and_the_summary_reports_them(tiny4):
    from mlm_ppl import summary, to_inference_data

    run = sample(tiny4, LONG, kernel="surrogate-mh", num_chains=2, num_samples=20, seed=0, inner_steps=3)
    assert {"n_moves", "inner_acceptance", "masked_copies"} <= set(run.stats)
    report = summary(to_inference_data(run, mlm=tiny4))
    assert report.inner_acceptance is not None and 0 <= report.inner_acceptance <= 1
    assert report.masked_copies_per_step > 0 and "inner acceptance" in str(report)
    plain = summary(to_inference_data(sample(tiny4, LONG, num_chains=2, num_samples=20, seed=0), mlm=tiny4))
    assert plain.inner_acceptance is None and "inner acceptance" not in str(plain)


def test_bad_options_fail_before_any_work(tiny4):
    dist = MaskedLMDistribution(tiny4, LONG)
    with pytest.raises(ValueError, match="surrogate_window must be an integer >= 0, got -1"):
        SurrogateMH(dist, surrogate_window=-1)
    with pytest.raises(TypeError, match="surrogate_window must be an integer, got float 1.5"):
        SurrogateMH(dist, surrogate_window=1.5)
    with pytest.raises(ValueError, match="inner_steps"):
        SurrogateMH(dist, inner_steps=0)
    with pytest.raises(ValueError, match="unknown surrogate_dtype 'float8'"):
        SurrogateMH(dist, surrogate_dtype="float8")
    with pytest.raises(TypeError, match="kernel 'mh'.*surrogate_window"):
        make_kernel("mh", dist, surrogate_window=1)
    with pytest.raises(TypeError, match="sum of per-position terms"):
        SurrogateMH(goyal_counterexample())
    with pytest.raises(ValueError, match="surrogate_context must be an integer >= 0, got -1"):
        SurrogateMH(dist, surrogate_context=-1)
    with pytest.raises(TypeError, match="surrogate_context must be an integer, got float 2.5"):
        SurrogateMH(dist, surrogate_context=2.5)
    with pytest.raises(ValueError, match=r"surrogate_context \(1\) must be at least surrogate_window \(2\)"):
        SurrogateMH(dist, surrogate_window=2, surrogate_context=1)
    assert SurrogateMH(dist).inner_steps == 4 * dist.num_free
    with pytest.raises(ValueError, match=r"p_unmask must lie in \[0, 1\], got 2.0"):
        SurrogateMH(dist, p_unmask=2.0)
    with pytest.raises(ValueError, match="unmask_size=4 is larger than the 3 free positions"):
        SurrogateMH(dist, p_unmask=0.5, unmask_size=4)
    with pytest.raises(ValueError, match="unmask_size=2 does nothing without p_unmask > 0"):
        SurrogateMH(dist, unmask_size=2)
    with pytest.raises(ValueError, match="block_size=4 is larger than the 3 free positions"):
        SurrogateMH(dist, block_size=4)


def test_a_model_without_position_ids_refuses_a_cropped_context(tiny4, monkeypatch):
    """A crop read at new places would be another model's surrogate (measured on AntiBERTy: its
    free positions' energy moved by 9-10 nats): refused before any work, saying what to do."""
    dist = MaskedLMDistribution(tiny4, LONG)
    monkeypatch.setattr(type(tiny4), "reads_position_ids", property(lambda self: False))
    with pytest.raises(ValueError, match="does not place tokens by the position_ids.*surrogate_frame 'crop'"):
        SurrogateMH(dist, surrogate_context=2)
    with pytest.raises(ValueError, match="does not place tokens by the position_ids"):
        SurrogateMH(dist, surrogate_frame="frozen")
    assert SurrogateMH(dist).surrogate.columns.numel() == 11  # uncropped: no position ids needed


def test_whether_a_model_places_tokens_by_position_ids_is_probed(tiny_models):
    """BERT, RoBERTa, ESM (rotary, reading position_ids) and a compiled encoder place tokens where
    their ids say; DeBERTa takes position_ids but derives relative positions from the length, so a
    crop would silently close its gaps: it is refused."""
    import warnings

    from mlm_ppl.models import MaskedLM

    bert = tiny_models["bert"][0]
    for name, (mlm, _) in tiny_models.items():
        assert mlm.reads_position_ids, name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.compile's and DeBERTa's use of torch.jit
        assert MaskedLM(bert.model, bert.tokenizer, compile=True).reads_position_ids
        from transformers import DebertaV2Config, DebertaV2ForMaskedLM

        cfg = DebertaV2Config(
            vocab_size=bert.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
            pad_token_id=bert.pad_id,
        )
        deberta = MaskedLM(DebertaV2ForMaskedLM(cfg).eval(), bert.tokenizer, name="tiny-deberta")
        assert not deberta.reads_position_ids
        dist = MaskedLMDistribution(deberta, "the [MASK] sat")
        with pytest.raises(ValueError, match="'tiny-deberta' does not place tokens by the position_ids"):
            SurrogateMH(dist, surrogate_context=1)


def test_a_frozen_frame_is_the_model_where_the_frame_would_not_change(tiny_models):
    """The frozen forward (live columns through every layer, the other columns' keys and values from
    the reference) is the model itself when every column is live, and when the copy's frame equals the
    reference's (nothing masked): it differs only in what the frame does not see change."""
    for name, (mlm, inputs) in tiny_models.items():
        ids = mlm.encode(inputs[:1]).input_ids
        T = int((ids[0] != mlm.pad_id).sum()) if mlm.pad_id is not None else ids.shape[1]
        ids = ids[:, :T]
        if name == "esm":  # pre-LayerNorm, rotary: refused, saying what to use instead
            with pytest.raises(ValueError, match="BERT-like encoders.*surrogate_frame='crop'"):
                mlm.frozen_frame(ids[0], torch.arange(T))
            continue
        query = torch.arange(1, T - 1)[None]
        own = mlm.logits_at(ids, torch.ones_like(ids), query)
        every = torch.arange(T)
        frozen_none = mlm.logits_at(
            ids,
            torch.ones_like(ids),
            query,
            position_ids=mlm.position_ids(every)[None],
            frame=mlm.frozen_frame(ids[0], every),
        )
        assert torch.equal(own, frozen_none), name
        live = torch.arange(2, T - 2)
        part = mlm.logits_at(
            ids[:, live],
            torch.ones_like(ids[:, live]),
            torch.arange(live.numel())[None],
            position_ids=mlm.position_ids(live)[None],
            frame=mlm.frozen_frame(ids[0], live),
        )
        assert torch.allclose(part, own[:, 1 : T - 3], atol=1e-4), name


def test_the_frozen_surrogate_reads_the_reference_fill(tiny4):
    """The frozen reference is the template with each free position's most likely allowed token, all
    masked together: the same for every chain and seed; frozen copies differ from whole ones."""
    dist = MaskedLMDistribution(tiny4, LONG)
    ref = dist.frozen_reference()
    logits = tiny4.block_logits(dist.template[None], dist.free_positions[None])[0]
    expected = logits.masked_fill(~dist.allowed, float("-inf")).argmax(-1)
    assert torch.equal(ref[dist.free_positions], expected)
    assert torch.equal(ref[~dist.free], dist.template[~dist.free])
    kernel = SurrogateMH(dist, surrogate_frame="frozen")
    assert kernel.surrogate.context == 0 and kernel.surrogate.columns.numel() == 5
    states = run_chains(MetropolisHastings(dist), 4, 1, seed=0).tokens[:, 0]
    frozen = kernel.surrogate.evaluate(states).energy
    whole = dist.evaluate(states, kernel.surrogate.positions).energy
    assert not torch.allclose(frozen, whole, atol=1e-3)
    with pytest.raises(ValueError, match="unknown surrogate_frame 'thawed'"):
        SurrogateMH(dist, surrogate_frame="thawed")
    import pickle

    pickle.loads(pickle.dumps(dist))  # making the frame leaves no hook on the model (Ray workers pickle it)


def test_a_surrogate_target_refuses_an_unknown_frame(tiny4):
    """Built directly (SurrogateMH checks its own option), a frame other than 'crop' or 'frozen'
    is refused instead of being read as 'frozen'."""
    from mlm_ppl.models import SurrogateTarget

    dist = MaskedLMDistribution(tiny4, LONG)
    with pytest.raises(ValueError, match="frame must be 'crop' or 'frozen', got 'frozn'"):
        SurrogateTarget(dist, 0, None, context=2, frame="frozn")
    assert SurrogateTarget(dist, 0, None, context=2, frame="crop").frame is None
