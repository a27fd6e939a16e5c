"""What each triton-fa2 configuration costs an SM on sm_90, compiled here without a GPU (issue 10).

    python3 scripts/triton_fa2_resources.py            # d=128 fp16, causal and not
    python3 scripts/triton_fa2_resources.py 64         # another head dim

For every entry of CONFIGS: registers a thread and spilled bytes (ptxas's own report of Triton's
compile, with the launch's specialization: kbench.kernel_resources.from_triton), shared memory a
program (Triton's metadata), and how many
programs an H100/H200 SM holds at once (kbench.occupancy) and what limits them. Why it matters: with one program an SM,
the two warpgroups of a 128-row tile meet at a barrier every K/V tile, so the tensor cores idle
during the softmax; with two or more programs an SM, one's softmax overlaps another's matrix
products. A configuration that spills (ptxas: spill stores) ran several times slower on the H200.
Needs Triton (the version the GPU machine runs gives its numbers) and its bundled ptxas.
`kbench explain attention --impl triton-fa2 --param config=N` shows the same for one configuration.
"""

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # compile for the GPU, not the interpreter

from kbench import loader  # noqa: E402
from kbench.occupancy import blocks_per_sm  # noqa: E402
from kbench.suite import Case  # noqa: E402


def main(argv: list[str]) -> int:
    head_dim = int(argv[0]) if argv else 128
    registry = loader.load()
    module = sys.modules[registry.implementations("attention")["triton-fa2"].make.__module__]
    print(f"triton {module.triton.__version__}, sm_90, fp16, d={head_dim}, TMA path, N=4096 B2 H16")
    print(f"{'config':>6}  {'tile':>8} {'warps':>5} {'stages':>6} {'maxnreg':>7}  {'causal':>6}  {'regs':>4} "
          f"{'spilled':>7} {'shared':>8}  programs/SM (limit)")
    for index, cfg in enumerate(module.CONFIGS):
        for causal in (False, True):
            case = Case({"n": 4096, "d": head_dim, "batch": 2, "heads": 16, "dtype": "fp16", "causal": causal})
            res = module.compiled_resources(case, cfg, tma=True)
            shared = res["dynamic_smem_bytes"]
            fit = blocks_per_sm(cfg["num_warps"] * 32, res["registers"], shared, (9, 0))
            print(f"{index:>6}  {cfg['BLOCK_M']:>3}x{cfg['BLOCK_N']:<4} {cfg['num_warps']:>5} {cfg['num_stages']:>6} "
                  f"{cfg.get('maxnreg', '-'):>7}  {causal!s:>6}  {res['registers']:>4} {res['spill_stores']:>7} "
                  f"{shared:>8,}  {fit['blocks_per_sm']} ({', '.join(fit['limited_by'])})"
                  + ("  SPILLS" if res["spill_stores"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
