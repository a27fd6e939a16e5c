"""The harness's own two GPU kernels, in PTX, loaded and launched through the CUDA driver API (ctypes).

- ``stamp_sm0``: one warp a program that stamps SM 0's cycle counter and the global nanosecond timer.
  Launched with one program per SM, so that one lands on SM 0 (nvbench reads the clock the same way):
  two stamps around a timed call give the SM clock it ran at, Δcycles / Δns.
- ``spin``: programs that spin on the global timer for a given time; two of 1,024 threads an SM fill
  every SM's 2,048 thread slots (``.minnctapersm 2`` keeps them at 32 registers a thread or fewer).

Why not Triton or CuPy: every worker times through these, and a first Triton launch in a process costs
about half a second (its runtime's start-up), each later launch ~10-20 us of host time, twice a sample.
A module of hand-written PTX loads in milliseconds, and a driver launch takes a few microseconds. The
kernels run on torch's current stream, in the context torch made current.
"""

from __future__ import annotations

import ctypes

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry kbench_stamp_sm0(.param .u64 out)
{
    .reg .pred %p;
    .reg .b32 %r<3>;
    .reg .b64 %rd<4>;
    mov.u32 %r0, %smid;
    mov.u32 %r1, %tid.x;
    or.b32 %r2, %r0, %r1;
    setp.ne.u32 %p, %r2, 0;
    @%p bra DONE;
    mov.u64 %rd0, %globaltimer;
    mov.u64 %rd1, %clock64;
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd3, %rd2;
    st.global.u64 [%rd3], %rd0;
    st.global.u64 [%rd3+8], %rd1;
DONE:
    ret;
}

.visible .entry kbench_spin(.param .u64 duration_ns)
.maxntid 1024, 1, 1
.minnctapersm 2
{
    .reg .pred %p;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd0, [duration_ns];
    mov.u64 %rd1, %globaltimer;
LOOP:
    mov.u64 %rd2, %globaltimer;
    sub.u64 %rd3, %rd2, %rd1;
    setp.lt.u64 %p, %rd3, %rd0;
    @%p bra LOOP;
    ret;
}
"""

CU_FUNC_ATTRIBUTE_NUM_REGS = 4


class CudaError(RuntimeError):
    pass


class Kernels:
    """The module, loaded into the current context at construction; ``stamp`` and ``spin`` launch."""

    def __init__(self):
        self.driver = ctypes.CDLL("libcuda.so.1")
        module = ctypes.c_void_p()
        self._check(self.driver.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX.encode())),
                    "cuModuleLoadData")
        self.module = module
        self.stamp_fn = self._function(b"kbench_stamp_sm0")
        self.spin_fn = self._function(b"kbench_spin")

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise CudaError(f"{what} failed with CUDA error {status}")

    def _function(self, name: bytes) -> ctypes.c_void_p:
        function = ctypes.c_void_p()
        self._check(self.driver.cuModuleGetFunction(ctypes.byref(function), self.module, name), "cuModuleGetFunction")
        return function

    def registers(self, function: ctypes.c_void_p) -> int:
        count = ctypes.c_int(0)
        self._check(self.driver.cuFuncGetAttribute(ctypes.byref(count), CU_FUNC_ATTRIBUTE_NUM_REGS, function),
                    "cuFuncGetAttribute")
        return count.value

    def _launch(self, function, grid: int, block: int, argument: int, stream: int) -> None:
        value = ctypes.c_uint64(argument)
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(value), ctypes.c_void_p))
        self._check(self.driver.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, ctypes.c_void_p(stream),
                                               params, None), "cuLaunchKernel")

    def stamp(self, programs: int, out_pointer: int, stream: int) -> None:
        """Write SM 0's (global ns, clock64) to the two int64 at ``out_pointer``."""
        self._launch(self.stamp_fn, programs, 32, out_pointer, stream)

    def spin(self, programs: int, duration_ns: int, stream: int) -> None:
        """``programs`` programs of 1,024 threads, each spinning ``duration_ns`` from its start."""
        self._launch(self.spin_fn, programs, 1024, max(0, int(duration_ns)), stream)


_loaded: Kernels | None = None


def kernels() -> Kernels:
    """This process's module (loaded at the first call, in the context current then)."""
    global _loaded
    if _loaded is None:
        _loaded = Kernels()
    return _loaded
