"""Cross-check kbench's timing against triton.testing.do_bench on the same SDPA calls.

Prints one line per backend: do_bench median (ms) and TFLOP/s, for the case
B=2, H=16, N=4096, d=128, fp16 (../shared/peers.md measured it with do_bench too).
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

B, H, N, D = 2, 16, int(sys.argv[1]) if len(sys.argv) > 1 else 4096, 128
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
flops = 4 * B * H * N * N * D
for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v), warmup=100, rep=500, return_mode="median")
    print(f"do_bench {backend:20s} N={N}: {ms:.4f} ms  {flops / ms / 1e9:.1f} TFLOP/s")
