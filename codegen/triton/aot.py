"""Ahead-of-time compile of generated Triton kernels for a GPU target, without a GPU.

Proves a kernel builds for sm_80 / sm_90 and reports what it needs (shared memory,
registers where known, warps).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...errors import LuminalError
from ...ir.dtypes import DType
from ..kernel import Kernel
from ..knobs import Schedule
from . import schedule as sched
from .backend import load_source
from .emit import emit_typed

POINTER = {DType.float32: "*fp32", DType.float16: "*fp16", DType.bfloat16: "*bf16", DType.int64: "*i64",
           DType.int32: "*i32", DType.bool: "*u8"}


@dataclass
class AotInfo:
    arch: int
    shared: int  # bytes of shared memory per block
    num_warps: int
    num_stages: int
    n_regs: int | None
    fits: bool  # shared memory within the architecture's limit

    def to_dict(self) -> dict:
        return asdict(self)


def compile_aot(kernel: Kernel, schedule: Schedule | None = None, arch: int = 90) -> AotInfo:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    typed = sched.typed(kernel, schedule or sched.default(kernel))
    if typed is None:
        raise ValueError(f"not a schedule of this {sched.kind_of(kernel)} kernel: {schedule}")
    mod = load_source(emit_typed(kernel, typed))
    signature = {f"in{i}": POINTER[b.dtype] for i, b in enumerate(kernel.inputs)}
    signature.update({f"out{i}": POINTER[b.dtype] for i, (_, b) in enumerate(kernel.outputs)})
    consts = sched.constexprs(kernel, typed)
    signature.update({k: "constexpr" for k in consts})
    options: dict[str, int | bool] = {"num_stages": 3, **sched.launch_options(typed), "enable_fp_fusion": False}
    try:
        ck = triton.compile(ASTSource(fn=mod.kernel, signature=signature, constexprs=consts),
                            target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as e:  # a compile failure is a result to report, not a crash
        raise LuminalError(f"Triton AOT compile for sm_{arch} failed: {type(e).__name__}: "
                           f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}") from e
    md = ck.metadata
    shared = int(md.shared)
    return AotInfo(arch, shared, int(md.num_warps), int(md.num_stages), getattr(ck, "n_regs", None),
                   shared <= sched.SMEM_LIMIT.get(arch, sched.SMEM_LIMIT[80]))
