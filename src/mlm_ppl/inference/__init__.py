"""How states move: MCMC kernels over token sequences.

The kernels (Metropolis-Hastings with MLM proposals, pseudo-Gibbs, mask-predict) and their
Pyro adapter are built on :meth:`mlm_ppl.MaskedLM.masked_log_probs`; see the samplers issue.
"""

__all__: list[str] = []
