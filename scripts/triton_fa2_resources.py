"""What each triton-fa2 configuration costs an SM on sm_90, compiled here without a GPU (issue 10).

    python3 scripts/triton_fa2_resources.py            # d=128 fp16, causal and not
    python3 scripts/triton_fa2_resources.py 64         # another head dim

For every entry of CONFIGS: registers a thread and spilled bytes (ptxas's own log of Triton's
compile, TRITON_DUMP_PTXAS_LOG), shared memory a program (Triton's metadata), and how many
programs an H100/H200 SM holds at once (kbench.occupancy) and what limits them. Why it matters: with one program an SM,
the two warpgroups of a 128-row tile meet at a barrier every K/V tile, so the tensor cores idle
during the softmax; with two or more programs an SM, one's softmax overlaps another's matrix
products. A configuration that spills (ptxas: spill stores) ran several times slower on the H200.
Needs Triton (the version the GPU machine runs gives its numbers) and its bundled ptxas.
"""

import contextlib
import io
import os
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)  # compile for the GPU, not the interpreter
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # a cached kernel would not run ptxas, so print no log

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from kbench import loader  # noqa: E402
from kbench.occupancy import blocks_per_sm  # noqa: E402

def compile_config(module, cfg: dict, head_dim: int, causal: bool):
    """(registers, spill bytes, shared bytes) of one configuration, fp16, through the TMA path."""
    fn = module._fa2_forward
    signature = {name: "i32" for name in fn.arg_names}
    signature.update({name: "*fp16" for name in "QKVO"}, qk_scale_log2="fp32")
    constants = {"HEAD_DIM": head_dim, "CAUSAL": causal, "PRECISION": "native", "TMA": True,
                 "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"]}
    signature.update({name: "constexpr" for name in constants})
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        kernel = triton.compile(triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constants),
                                target=GPUTarget("cuda", 90, 32), options=module._launch_options(cfg))
    text = log.getvalue()
    registers = int(re.search(r"Used (\d+) registers", text).group(1))
    spilled = int(re.search(r"(\d+) bytes spill stores", text).group(1))
    return registers, spilled, kernel.metadata.shared


def main(argv: list[str]) -> int:
    head_dim = int(argv[0]) if argv else 128
    registry = loader.load()
    module = sys.modules[registry.implementations("attention")["triton-fa2"].make.__module__]
    print(f"triton {triton.__version__}, sm_90, fp16, d={head_dim}")
    print(f"{'config':>6}  {'tile':>8} {'warps':>5} {'stages':>6} {'maxnreg':>7}  {'causal':>6}  {'regs':>4} "
          f"{'spilled':>7} {'shared':>8}  programs/SM (limit)")
    for index, cfg in enumerate(module.CONFIGS):
        for causal in (False, True):
            registers, spilled, shared = compile_config(module, cfg, head_dim, causal)
            fit = blocks_per_sm(cfg["num_warps"] * 32, registers, shared, (9, 0))
            print(f"{index:>6}  {cfg['BLOCK_M']:>3}x{cfg['BLOCK_N']:<4} {cfg['num_warps']:>5} {cfg['num_stages']:>6} "
                  f"{cfg.get('maxnreg', '-'):>7}  {causal!s:>6}  {registers:>4} {spilled:>7} {shared:>8,}  "
                  f"{fit['blocks_per_sm']} ({', '.join(fit['limited_by'])})" + ("  SPILLS" if spilled else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
