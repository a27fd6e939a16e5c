"""How the split-KV decode kernels cut a batch's sequences into pieces.

A private helper (the loader skips `_` files): kernel files load it with
``kbench.loader.load_helper(Path(__file__).parent / "_lengths.py")``.

``--l 1000+130000`` is a ragged batch: one length a sequence, the cache as long as the longest. The
kernels cut every sequence into pieces of one length; a piece past a sequence's end does no work but
write an empty state. So that each sequence gets programs in proportion to its tokens, a ragged batch
is counted as its tokens in sequences of the longest length (``batch_by_tokens``) when a kernel
chooses how many pieces fill the GPU: counted by its sequences, 1000+130000 would be cut as two
sequences of 130,000 tokens, leaving the long one half the programs it would get alone.
"""

from __future__ import annotations

from fractions import Fraction

from kbench.loader import BUILTIN_SUITES, load_helper

# The lengths themselves, as the suite defines them (suites/_common/sequence_lengths.py)
_sequences = load_helper(BUILTIN_SUITES / "_common" / "sequence_lengths.py")
lengths, is_ragged = _sequences.sequence_lengths, _sequences.is_ragged


def cache_length(case) -> int:
    """The cache's tokens a sequence: L, or a ragged batch's longest."""
    return max(lengths(case))


def batch_by_tokens(case) -> Fraction:
    """The batch in sequences of the longest length: the batch itself, or fewer for a ragged one
    (1000+130000: 131/130)."""
    each = lengths(case)
    return Fraction(sum(each), max(each))


def pieces_each(case, keys_per_piece: int) -> list[int]:
    """The pieces of ``keys_per_piece`` keys each sequence's tokens take."""
    return [-(-n // keys_per_piece) for n in lengths(case)]


def pieces_a_sequence(case, splits: int, keys_per_piece: int, launched_a_piece: int, what: str = "programs") -> str:
    """`kbench explain`'s line for a ragged batch: each sequence's pieces, and how many of the ``splits``
    pieces a sequence launched (``launched_a_piece`` ``what`` each: K/V heads x row blocks) start past
    their sequence's end."""
    pieces = pieces_each(case, keys_per_piece)
    idle = sum(splits - p for p in pieces) * launched_a_piece
    return (", ".join(f"{n:,} tokens: {p}" for n, p in zip(lengths(case), pieces))
            + f"; {idle} {what} past a sequence's end only write an empty state")
