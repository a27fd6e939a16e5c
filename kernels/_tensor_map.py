"""TMA tensor maps (CUtensorMap) for CuPy kernels: encoded on the host by the CUDA driver's
``cuTensorMapEncodeTiled`` and passed to the kernel by value.

A private helper (the loader skips `_` files): kernel files load it with
``kbench.loader.load_helper(Path(__file__).parent.parent / "_tensor_map.py")``.

How the map reaches the kernel: the kernel declares it as ``const __grid_constant__ TensorMap``
(128 bytes, 64-byte aligned: kernels/_cuda/kbench_sm90.cuh), so that the TMA unit reads it from the
parameter space and no copy to device memory (nor a ``fence.proxy.tensormap``) is needed. CuPy's
launch passes a numpy array of one element by value: cuLaunchKernel copies the parameter's 128 bytes
from the array's data. So the encoded map is a one-element numpy array of a 128-byte record.

Why ctypes on libcuda rather than the cuda-bindings package: the encode is one driver call with
plain integer and array arguments, libcuda.so.1 is wherever a CUDA driver is (torch has loaded it),
and its signature and enum values are the driver's stable ABI (cuda.h), while the bindings' Python
types have changed between releases and the package is not a kbench dependency.
"""

from __future__ import annotations

from dataclasses import dataclass

MAP_BYTES = 128  # sizeof(CUtensorMap)
MAP_ALIGN = 64  # alignof(CUtensorMap): cuTensorMapEncodeTiled requires it of its output

# cuda.h: CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
# CUtensorMapFloatOOBfill.
DATA_TYPES = {"fp16": 6, "fp32": 7, "bf16": 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16, _FLOAT32, _BFLOAT16
ELEMENT_BYTES = {"fp16": 2, "fp32": 4, "bf16": 2}
INTERLEAVE_NONE = 0
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # swizzle span in bytes -> CU_TENSOR_MAP_SWIZZLE_NONE/32B/64B/128B
# CU_TENSOR_MAP_L2_PROMOTION_*: how far the copy engine widens each of its reads from DRAM into L2.
L2_PROMOTION = {0: 0, 64: 1, 128: 2, 256: 3}  # bytes -> NONE, L2_64B, L2_128B, L2_256B
OOB_FILL_ZEROS = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the tensor read as zeros


@dataclass(frozen=True)
class Tiled2D:
    """The arguments of cuTensorMapEncodeTiled for a row-major rows x cols matrix read in boxes of
    box_rows x box_cols elements. Dimension 0 is the contiguous one (columns), as the driver orders them."""

    dtype: str
    address: int
    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle_bytes: int = 128
    l2_promotion: int = 256  # bytes (L2_PROMOTION); 256 unless a kernel asks otherwise

    @property
    def dims(self) -> tuple[int, int]:
        return (self.cols, self.rows)

    @property
    def strides(self) -> tuple[int]:
        """Byte stride of dimension 1 (rows); dimension 0's is the element size, implied."""
        return (self.cols * ELEMENT_BYTES[self.dtype],)

    @property
    def box(self) -> tuple[int, int]:
        return (self.box_cols, self.box_rows)

    def problem(self) -> str | None:
        """Why the driver would refuse this map (cuTensorMapEncodeTiled's documented requirements), or None."""
        e = ELEMENT_BYTES.get(self.dtype)
        if e is None:
            return f"{self.dtype}: no TMA data type here (fp16, bf16, fp32)"
        if self.address % 16:
            return "the tensor's address is not a multiple of 16 bytes"
        if self.strides[0] % 16:
            return (f"a row of {self.cols} {self.dtype} elements is {self.strides[0]} bytes, not a multiple "
                    f"of 16 (TMA's global strides must be): {self.cols} must be a multiple of {16 // e}")
        if self.strides[0] >= 2**40:
            return "a row stride of 2^40 bytes or more"
        if not (0 < self.rows <= 2**32 and 0 < self.cols <= 2**32):
            return f"a {self.rows} x {self.cols} matrix: each dimension must be between 1 and 2^32"
        if not (0 < self.box_rows <= 256 and 0 < self.box_cols <= 256):
            return f"a {self.box_rows} x {self.box_cols} box: each side must be between 1 and 256"
        if (self.box_cols * e) % 16:
            return f"a box row of {self.box_cols * e} bytes: it must be a multiple of 16"
        if self.l2_promotion not in L2_PROMOTION:
            return f"an L2 promotion of {self.l2_promotion} bytes: 0, 64, 128 or 256"
        if self.swizzle_bytes not in SWIZZLE:
            return f"a {self.swizzle_bytes}-byte swizzle: 0, 32, 64 or 128"
        if self.swizzle_bytes and self.box_cols * e > self.swizzle_bytes:
            return f"a box row of {self.box_cols * e} bytes is wider than the {self.swizzle_bytes}-byte swizzle"
        return None


@dataclass(frozen=True)
class Batched3D(Tiled2D):
    """A stack of ``batches`` row-major rows x cols matrices, one after another in memory (a contiguous
    batches x rows x cols tensor), read in boxes of box_rows x box_cols of one matrix. Against a 2-D
    map over all the rows, the third dimension keeps a box that overhangs one matrix's last row from
    reading the next matrix: TMA fills those rows with zeros instead."""

    batches: int = 1

    @property
    def dims(self) -> tuple[int, int, int]:
        return (self.cols, self.rows, self.batches)

    @property
    def strides(self) -> tuple[int, int]:
        """Byte strides of dimensions 1 (rows) and 2 (matrices)."""
        row = self.cols * ELEMENT_BYTES.get(self.dtype, 0)
        return (row, row * self.rows)

    @property
    def box(self) -> tuple[int, int, int]:
        return (self.box_cols, self.box_rows, 1)

    def problem(self) -> str | None:
        if not 0 < self.batches <= 2**32:
            return f"{self.batches} matrices: between 1 and 2^32"
        if self.strides[1] >= 2**40:
            return "a matrix stride of 2^40 bytes or more"
        return super().problem()


def record_dtype():
    """The numpy type of one encoded map: 16 little-endian 64-bit words, 128 bytes."""
    import numpy as np

    return np.dtype([("opaque", "<u8", (MAP_BYTES // 8,))])


def aligned_record():
    """A zeroed one-element array of record_dtype whose data starts at a multiple of 64 bytes."""
    import numpy as np

    raw = np.zeros(MAP_BYTES + MAP_ALIGN, dtype=np.uint8)
    offset = -raw.ctypes.data % MAP_ALIGN
    return raw[offset:offset + MAP_BYTES].view(record_dtype())


def _driver():
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"the CUDA driver library (libcuda.so.1) could not be loaded: {exc}") from None
    encode = lib.cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    encode.restype = ctypes.c_int
    return encode


def encode(spec: Tiled2D, encoder=None):
    """The tensor map of ``spec`` as a one-element numpy array (the kernel argument). ``encoder``:
    a stand-in for cuTensorMapEncodeTiled (tests); ValueError for what the driver would refuse."""
    import ctypes

    reason = spec.problem()
    if reason:
        raise ValueError(reason)
    record = aligned_record()
    rank = len(spec.dims)
    dims = (ctypes.c_uint64 * rank)(*spec.dims)
    strides = (ctypes.c_uint64 * (rank - 1))(*spec.strides)
    box = (ctypes.c_uint32 * rank)(*spec.box)
    element_strides = (ctypes.c_uint32 * rank)(*([1] * rank))
    status = (encoder or _driver())(
        ctypes.c_void_p(record.ctypes.data), DATA_TYPES[spec.dtype], rank, ctypes.c_void_p(spec.address), dims, strides,
        box, element_strides, INTERLEAVE_NONE, SWIZZLE[spec.swizzle_bytes], L2_PROMOTION[spec.l2_promotion],
        OOB_FILL_ZEROS)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {status} for {spec}")
    return record
