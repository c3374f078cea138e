"""The exact transition matrix of one MLMGibbs iteration over a binary discrete site ``z`` and a
token site ``x`` (imported by name: pytest puts this folder on sys.path)."""

import torch

from mlm_ppl.inference import exact


def gibbs_iteration_matrix(kernel, states):
    """``(2S, 2S)`` float64 over the states ``(z, x)`` (``z``-major): ``z | x`` drawn from the
    kernel's log joint, then ``x | z`` by the token kernel it built for ``z`` held."""
    S = len(states)
    support = kernel.discrete_support("z")
    Pz = torch.zeros(2 * S, 2 * S, dtype=torch.float64)
    for s in range(S):
        logp = torch.stack([kernel.log_joint({"x": states[s], "z": v}) for v in support]).double()
        for z in range(2):
            Pz[z * S + s, torch.arange(2) * S + s] = torch.softmax(logp, 0)
    Px = torch.zeros(2 * S, 2 * S, dtype=torch.float64)
    for z, value in enumerate(support):
        kernel.hold("z", value)
        Px[z * S : (z + 1) * S, z * S : (z + 1) * S] = exact.transition_matrix(kernel.site_kernel("x"), states)
    return Pz @ Px
