"""Input distributions that stress an attention softmax, for the suites whose inputs are Q, K and V
(attention, decode). N(0, 1) inputs never do: their scores stay within a few units.

- ``normal``: every element N(0, 1).
- ``large-scores``: Q and K scaled so the scores have a standard deviation of LARGE_SCORE_STD (the
  largest of a 32 x 32 block pass 100): a softmax that does not subtract the row's maximum overflows
  fp32.
- ``outliers``: two feature channels of Q and K 12x larger (the outlier features of real
  activations), one query row 8x and three value rows 24x.
- ``near-constant``: every key nearly the same vector, so each row's softmax is close to uniform and
  its sum runs over every key tile; V a ramp along the keys, so a dropped tile moves the answer.
- ``growing``: scores that grow along the keys to about GROWING_SCORE·√d at the last one: the running
  maximum of an online softmax moves at every tile, the newest keys carry most of each row's weight,
  and under a causal mask every masked key scores higher than every visible one.
"""

LARGE_SCORE_STD = 48.0
GROWING_SCORE = 16.0  # growing: the last key's extra score, in units of √d


def shape_inputs(q, k, v, distribution: str, gen) -> None:
    """Turn N(0, 1) draws of Q (... x queries x d) and K, V (... x keys x d), float32, into
    ``distribution``, in place, drawing from ``gen`` (on the tensors' device, as ``gen`` is)."""
    import torch

    n_queries, n_keys, d = q.shape[-2], k.shape[-2], q.shape[-1]
    on = {"device": q.device}
    if distribution == "normal":
        return
    if distribution == "large-scores":
        q.mul_(LARGE_SCORE_STD**0.5)
        k.mul_(LARGE_SCORE_STD**0.5)
    elif distribution == "outliers":
        channels = torch.randperm(d, generator=gen, **on)[:2]
        q[..., channels] *= 12.0
        k[..., channels] *= 12.0
        q[..., torch.randint(n_queries, (1,), generator=gen, **on), :] *= 8.0
        v[..., torch.randperm(n_keys, generator=gen, **on)[:3], :] *= 24.0
    elif distribution == "near-constant":
        k.mul_(1e-2).add_(torch.randn(d, generator=gen, **on))
        ramp = torch.linspace(0.0, 1.0, n_keys, **on).unsqueeze(-1)
        v.mul_(0.1).add_(ramp)
    elif distribution == "growing":
        u = torch.randn(d, generator=gen, **on)
        u *= (d**0.5) / u.norm()  # |u|² = d: the added score is GROWING_SCORE·√d·j/(keys-1) at key j
        position = torch.linspace(0.0, 1.0, n_keys, **on).unsqueeze(-1) if n_keys > 1 else torch.ones(1, 1, **on)
        q.add_(GROWING_SCORE**0.5 * u)
        k.add_(GROWING_SCORE**0.5 * position * u)
    else:
        raise ValueError(f"unknown input distribution {distribution!r}")
