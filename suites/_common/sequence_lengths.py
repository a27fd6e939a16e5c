"""A decode batch's sequence lengths, which the decode suite defines and its kernels read: one
definition for both.

``--l 4096`` gives every sequence of the batch 4,096 cached tokens; ``--l 1000+130000`` is a ragged
batch, one length a sequence (the batch their count), its cache as long as the longest. torch is
imported inside the functions: suites load this file when kbench starts.
"""

from kbench.errors import UserError


def parse_lengths(l) -> list[int]:
    """--l's value as lengths: a number, or a ragged batch's lengths joined by + (UserError otherwise)."""
    try:
        lengths = [int(part) for part in str(l).split("+")]
    except ValueError:
        raise UserError(f"--l: {l!r} is not a length (a number, or lengths joined by +: 1000+130000)") from None
    if min(lengths) <= 0:
        raise UserError(f"--l must be positive (got {l})")
    return lengths


def is_ragged(case) -> bool:
    return "+" in str(case.l)


def sequence_lengths(case) -> list[int]:
    """Each sequence's cached tokens: L for every one, or a ragged batch's own."""
    lengths = parse_lengths(case.l)
    return lengths if len(lengths) > 1 else lengths * case.batch


def ragged_lengths(case) -> list[int] | None:
    """A ragged batch's lengths, or None for one length a sequence (by_sequence's ``lengths``)."""
    return sequence_lengths(case) if is_ragged(case) else None


def by_sequence(attend, q, k, v, lengths=None, **options):
    """``attend(q, k, v, **options)`` over the whole batch, or, given a ragged batch's ``lengths``, over
    each sequence's own tokens (its first lengths[b] of the cache), the outputs joined along the batch."""
    import torch

    if lengths is None:
        return attend(q, k, v, **options)
    return torch.cat([attend(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], **options)
                      for b, n in enumerate(lengths)])
