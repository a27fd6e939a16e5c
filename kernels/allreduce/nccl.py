"""allreduce: NCCL's all-reduce through torch.distributed.all_reduce, in two settings.

- ``nccl``: NCCL picks the algorithm and protocol itself (NCCL_ALGO unset for the ranks).
- ``nccl-ring``: NCCL_ALGO=Ring in every rank's environment, set before the communicator is made
  (each implementation runs in its own kbench worker, so the setting never leaks into ``nccl``).

NVLink multicast (NVLS) is off in both (the suite's rank group sets NCCL_NVLS_ENABLE=0).

torch's all_reduce works in place, and the harness hands the closure an input it must not change and
an output it poisons before each check, so the closure copies the input into the output and then
all-reduces the output in place: kbench's median includes that device copy. ``op.alone`` is the
in-place all_reduce without the copy, timed back to back after kbench's samples (nccl-tests' method):
the figures report both.
"""

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import implementation

distributed = load_helper(BUILTIN_SUITES / "allreduce" / "rank_group.py")


def build(x, out):
    """Every rank: out <- the sum over the ranks of x (copy, then NCCL's in-place all-reduce)."""
    import torch.distributed as dist

    def op():
        out.copy_(x)
        dist.all_reduce(out)

    def alone():
        dist.all_reduce(out)

    op.alone = alone
    op.description = "copy x into out, then torch.distributed.all_reduce(out) in place"
    op.alone_description = "torch.distributed.all_reduce in place (no copy)"
    op.config = {"api": "torch.distributed.all_reduce (in place, after a copy of x into out)"}
    return op


@implementation("allreduce", "nccl", backend="nccl", cuda=True, unit="memory",
                description="torch.distributed.all_reduce over NCCL, NCCL's own choice of algorithm")
def nccl(case, inputs, out):
    return distributed.collective(case, inputs, out, build, env={"NCCL_ALGO": None})


@implementation("allreduce", "nccl-ring", backend="nccl", cuda=True, unit="memory",
                description="torch.distributed.all_reduce over NCCL with NCCL_ALGO=Ring")
def nccl_ring(case, inputs, out):
    return distributed.collective(case, inputs, out, build, env={"NCCL_ALGO": "Ring"})
