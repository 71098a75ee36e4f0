# SPDX-License-Identifier: MIT
# Copyright (C) 2024-2026, Advanced Micro Devices, Inc. All rights reserved.

import functools
import os
import re
from dataclasses import dataclass
from typing import Callable, Optional

import aiter
import torch

# from aiter import get_torch_quant as get_quant
from aiter import ActivationType, QuantType, dtypes
from aiter import get_hip_quant as get_quant
from aiter import logger
from aiter.jit.core import AITER_CONFIGS, AITER_CSRC_DIR, PY, bd_dir, mp_lock
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.jit.utils.torch_guard import torch_compile_guard
from aiter.ops.flydsl.utils import is_flydsl_available
from aiter.ops.flydsl.moe_common import GateMode
from aiter import (
    fused_dynamic_mxfp4_quant_moe_sort,
    fused_dynamic_mxfp8_quant_moe_sort,
    mxfp4_moe_sort_fwd,
)

BLOCK_SIZE_M = 32

# Default to Opus unless CK sorting is explicitly requested.
_USE_CK_MOE_SORTING = os.environ.get("AITER_USE_CK_MOE_SORTING", "0") == "1"
_ACT_TYPE_DISABLED_KEY = "__ignore__"
_SWIGLU_MXFP4_BF16_BOUND = int(os.environ.get("GPTOSS_SWIGLU_MXFP4_BF16_BOUND", "256"))
_MOE_A8W4_BYPASS_QUANT = os.environ.get("AITER_MOE_A8W4_BYPASS_QUANT", "0") == "1"

# FLAT 1stage asm kernels (manifest flat=1) ingest raw topk_ids /
# topk_weights through the sorted_* kernarg slots and accumulate via
# global_atomic_pk_add_bf16, so moe_sorting is a pass-through for them.


def _moe_prepare_unsorted_input(topk_ids, topk_weights, model_dim, moebuf_dtype):
    device = topk_ids.device
    M = topk_ids.shape[0]
    # FLAT kernels zero their own output rows on-device and need an
    # extra M*8-byte per-token coordination region appended to moe_buf.
    # We over-allocate as a flat byte buffer and expose only the row part.
    #
    # The trailing region does not need initialisation; the kernel
    # tolerates arbitrary contents on the first reference per dispatch.
    elem_size = torch.empty(0, dtype=moebuf_dtype).element_size()
    row_bytes = M * model_dim * elem_size
    flag_bytes = 8
    flat_buf = torch.empty(row_bytes + flag_bytes, dtype=torch.uint8, device=device)
    moe_buf = flat_buf[:row_bytes].view(moebuf_dtype).view(M, model_dim)
    topk_ids_i32 = (
        topk_ids
        if topk_ids.dtype == dtypes.i32 and topk_ids.is_contiguous()
        else topk_ids.to(dtypes.i32).contiguous()
    )
    topk_weights_f32 = (
        topk_weights
        if topk_weights.dtype == dtypes.fp32 and topk_weights.is_contiguous()
        else topk_weights.to(dtypes.fp32).contiguous()
    )
    # sorted_expert_ids / num_valid_ids slots are unread by FLAT kernels,
    # but must be valid device pointers -- alias topk_ids as scratch.
    return topk_ids_i32, topk_weights_f32, topk_ids_i32, topk_ids_i32, moe_buf


def _moe_sorting_impl(
    topk_ids,
    topk_weights,
    num_experts,
    model_dim,
    moebuf_dtype,
    block_size,
    expert_mask,
    num_local_tokens,
    dispatch_policy,
    use_opus,
    return_local_topk_ids=False,
    accumulate=True,
):
    device = topk_ids.device
    M, topk = topk_ids.shape
    max_num_tokens_padded = int(topk_ids.numel() + num_experts * block_size - topk)

    max_num_m_blocks = int((max_num_tokens_padded + block_size - 1) // block_size)
    sorted_ids = torch.empty(max_num_tokens_padded, dtype=dtypes.i32, device=device)
    sorted_weights = torch.empty(
        max_num_tokens_padded, dtype=dtypes.fp32, device=device
    )
    sorted_expert_ids = torch.empty(max_num_m_blocks, dtype=dtypes.i32, device=device)
    num_valid_ids = torch.empty(2, dtype=dtypes.i32, device=device)
    # moe_buf shape depends on the downstream stage2 path:
    #  - accumulate (or EP w/ expert_mask): stage2 atomically accumulates into [M, model_dim].
    #  - else (FlyDSL stage2 reduce mode without mask): caller owns the
    #    [M, topk, model_dim] intermediate; allocate a placeholder here.
    if (expert_mask is not None) or accumulate:
        moe_buf = torch.empty((M, model_dim), dtype=moebuf_dtype, device=device)
    else:
        moe_buf = torch.empty((0, 0), dtype=moebuf_dtype, device=device)
    local_topk_ids = torch.empty_like(topk_ids) if return_local_topk_ids else None
    if return_local_topk_ids:
        # CK sorting does not emit local ids; use Opus so callers do not need a slow
        # Python-side remap or a hard failure when local expert ids are required.
        use_opus = True

    if use_opus:
        ws_size = aiter.moe_sorting_opus_get_workspace_size(
            M, num_experts, topk, dispatch_policy
        )
        workspace = (
            torch.empty(ws_size, dtype=torch.uint8, device=device)
            if ws_size > 0
            else None
        )
        aiter.moe_sorting_opus_fwd(
            topk_ids,
            topk_weights,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            moe_buf,
            num_experts,
            int(block_size),
            expert_mask,
            num_local_tokens,
            workspace,
            dispatch_policy,
            local_topk_ids,
        )
    else:
        aiter.moe_sorting_fwd(
            topk_ids,
            topk_weights,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            moe_buf,
            num_experts,
            int(block_size),
            expert_mask,
            num_local_tokens,
            dispatch_policy,
        )
    ret = (sorted_ids, sorted_weights, sorted_expert_ids, num_valid_ids, moe_buf)
    if return_local_topk_ids:
        return (*ret, local_topk_ids)
    return ret


def moe_sorting(
    topk_ids,
    topk_weights,
    num_experts,
    model_dim,
    moebuf_dtype,
    block_size=BLOCK_SIZE_M,
    expert_mask=None,
    num_local_tokens=None,
    dispatch_policy=0,
    return_local_topk_ids=False,
    accumulate=True,
    flat=False,
):
    # FLAT kernel: in-kernel routing (manifest flat=1); pass through unsorted topk.
    if flat:
        return _moe_prepare_unsorted_input(
            topk_ids, topk_weights, model_dim, moebuf_dtype
        )
    try:
        return _moe_sorting_impl(
            topk_ids,
            topk_weights,
            num_experts,
            model_dim,
            moebuf_dtype,
            block_size,
            expert_mask,
            num_local_tokens,
            dispatch_policy,
            use_opus=not _USE_CK_MOE_SORTING,
            return_local_topk_ids=return_local_topk_ids,
            accumulate=accumulate,
        )
    except Exception as e:
        logger.error(f"Error in moe_sorting: {e}")
        max_num_tokens_padded = int(
            topk_ids.numel() + num_experts * block_size - topk_ids.shape[1]
        )
        topk = topk_ids.shape[1]
        logger.error(
            f"Moe_sorting info: {max_num_tokens_padded=} {block_size=} {num_experts=} {topk=} {topk_ids.shape=}"
        )
        raise e


def get_topk_valid_mask(
    topk_ids: torch.Tensor,
    expert_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Build valid_mask [token_num, topk] for EP mode.

    valid_mask[t, k] = 1 if topk_ids[t, k] points to a local (non-fake) expert,
    else 0. When expert_mask is None (non-EP), returns all-ones.
    """
    if expert_mask is None:
        return torch.ones(topk_ids.shape, dtype=dtypes.i32, device=topk_ids.device)
    return expert_mask[topk_ids]


def is_flydsl_stage2_reduce(stage2: Callable) -> bool:
    """Return True iff `stage2` is the FlyDSL stage2 wrapper compiled in
    reduce mode (i.e. its kernelName parses to ``mode == "reduce"``).

    All other stage2 paths (CK, cktile, FlyDSL atomic) return False, which
    keeps moe_sorting on the atomic-accumulate moe_buf shape.
    """
    func = getattr(stage2, "func", stage2)
    if func is not _flydsl_stage2_wrapper:
        return False
    kernel_name = getattr(stage2, "keywords", {}).get("kernelName", "")
    parsed = aiter.ops.flydsl.moe_kernels.get_flydsl_kernel_params(kernel_name)
    return parsed is not None and parsed.get("mode", "atomic") == "reduce"


# Lru cache will using hash to create key, which makes error when w1,w2 shape is symint.
# We can use torch.compile(dynamic=False) to avoid
@functools.lru_cache(maxsize=2048)
def get_inter_dim(w1_shape, w2_shape):
    E, _, model_dim = w1_shape
    E, model_dim, inter_dim = w2_shape

    int4_war = model_dim // w1_shape[-1]
    inter_dim *= int4_war
    return E, model_dim, inter_dim


def fused_moe(
    hidden_states,
    w1,  # [expert(local_expert:EP), inter_dim*2, dim] N,K
    w2,  # [expert(local_expert:EP), dim, inter_dim]
    topk_weight,
    topk_ids,
    expert_mask: Optional[torch.tensor] = None,  # EP
    activation=ActivationType.Silu,
    quant_type=QuantType.No,
    doweight_stage1=False,
    # following for quant
    w1_scale: Optional[torch.tensor] = None,  # [expert(local_expert:EP), inter_dim, 1]
    w2_scale: Optional[torch.tensor] = None,  # [expert(local_expert:EP), model_dim, 1]
    a1_scale: Optional[torch.tensor] = None,  # [expert(local_expert:EP), 1, model_dim]
    a2_scale: Optional[torch.tensor] = None,  # [expert(local_expert:EP), 1, inter_dim]
    # following for tuning
    block_size_M=None,
    num_local_tokens: Optional[torch.tensor] = None,
    moe_sorting_dispatch_policy=0,
    dtype=None,
    # following for cktile support
    hidden_pad=0,
    intermediate_pad=0,
    bias1=None,
    bias2=None,
    splitk=0,
    swiglu_limit=0.0,
    gate_mode: Optional[str] = GateMode.SEPARATED.value,
):
    if not block_size_M:
        block_size_M = -1
    return fused_moe_(
        hidden_states=hidden_states,
        w1=w1,
        w2=w2,
        topk_weight=topk_weight,
        topk_ids=topk_ids,
        expert_mask=expert_mask,
        activation=activation.value,
        quant_type=quant_type.value,
        doweight_stage1=doweight_stage1,
        w1_scale=w1_scale,
        w2_scale=w2_scale,
        a1_scale=a1_scale,
        a2_scale=a2_scale,
        block_size_M=block_size_M,
        num_local_tokens=num_local_tokens,
        moe_sorting_dispatch_policy=moe_sorting_dispatch_policy,
        dtype=dtype,
        hidden_pad=hidden_pad,
        intermediate_pad=intermediate_pad,
        bias1=bias1,
        bias2=bias2,
        swiglu_limit=swiglu_limit,
        gate_mode=gate_mode,
    )


def fused_moe_fake(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,  # [expert(local_expert:EP), inter_dim*2, dim] N,K
    w2: torch.Tensor,  # [expert(local_expert:EP), dim, inter_dim]
    topk_weight: torch.Tensor,
    topk_ids: torch.Tensor,
    expert_mask: Optional[torch.Tensor] = None,  # EP
    activation: int = ActivationType.Silu.value,
    quant_type: int = QuantType.No.value,
    doweight_stage1: bool = False,
    # following for quant
    w1_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), inter_dim, 1]
    w2_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), model_dim, 1]
    a1_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), 1, model_dim]
    a2_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), 1, inter_dim]
    # following for tuning
    block_size_M: int = -1,
    num_local_tokens: Optional[torch.Tensor] = None,
    moe_sorting_dispatch_policy: int = 0,
    dtype: Optional[torch.dtype] = None,
    hidden_pad: int = 0,
    intermediate_pad: int = 0,
    bias1: Optional[torch.Tensor] = None,
    bias2: Optional[torch.Tensor] = None,
    swiglu_limit: float = 0.0,
    gate_mode: str = GateMode.SEPARATED.value,
) -> torch.Tensor:
    device = topk_ids.device
    M, topk = topk_ids.shape
    dtype = hidden_states.dtype if dtype is None else dtype
    model_dim = w2.shape[1]
    moe_buf = torch.empty((M, model_dim), dtype=dtype, device=device)
    return moe_buf


@torch_compile_guard(gen_fake=fused_moe_fake)
def fused_moe_(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,  # [expert(local_expert:EP), inter_dim*2, dim] N,K
    w2: torch.Tensor,  # [expert(local_expert:EP), dim, inter_dim]
    topk_weight: torch.Tensor,
    topk_ids: torch.Tensor,
    expert_mask: Optional[torch.Tensor] = None,  # EP
    activation: int = ActivationType.Silu.value,
    quant_type: int = QuantType.No.value,
    doweight_stage1: bool = False,
    # following for quant
    w1_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), inter_dim, 1]
    w2_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), model_dim, 1]
    a1_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), 1, model_dim]
    a2_scale: Optional[torch.Tensor] = None,  # [expert(local_expert:EP), 1, inter_dim]
    # following for tuning
    block_size_M: int = -1,
    num_local_tokens: Optional[torch.Tensor] = None,
    moe_sorting_dispatch_policy: int = 0,
    dtype: Optional[torch.dtype] = None,
    hidden_pad: int = 0,
    intermediate_pad: int = 0,
    bias1: Optional[torch.Tensor] = None,
    bias2: Optional[torch.Tensor] = None,
    swiglu_limit: float = 0.0,
    gate_mode: str = GateMode.SEPARATED.value,
) -> torch.Tensor:
    # We do such convert since custom_op schema restriction on block_size_M, and Enum type
    activation = ActivationType(activation)
    quant_type = QuantType(quant_type)
    gate_mode = GateMode(gate_mode)
    if block_size_M == -1:
        block_size_M = None
    """user API"""
    M, topk = topk_ids.shape
    E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)

    assert w1.shape[1] in [
        inter_dim,
        inter_dim * 2,
    ], f"Invalid MoE weight: {w1.shape=} {w2.shape=}"
    isG1U1 = inter_dim != w1.shape[1]
    isShuffled = getattr(w1, "is_shuffled", False) or getattr(w2, "is_shuffled", False)

    global_E = E
    if expert_mask is not None:
        global_E = expert_mask.numel()
    dtype = hidden_states.dtype if dtype is None else dtype
    assert dtype in [
        dtypes.fp16,
        dtypes.bf16,
    ], f"Fused_moe unsupported out dtype: {dtype}"
    quant_type = quant_remap.get(quant_type, quant_type)
    q_dtype_w = w1.dtype
    q_dtype_a = w1.dtype if w1.dtype != torch.uint32 else dtypes.fp8
    # If input is already FP8-quantized (e.g. from FP8 dispatch) with block scale,
    # use FP8 as activation dtype to skip redundant re-quantization
    if (
        quant_type == QuantType.per_1x128
        and hidden_states.dtype == dtypes.fp8
        and a1_scale is not None
    ):
        q_dtype_a = dtypes.fp8
    bf16_fp8_bound = int(os.environ.get("AITER_BF16_FP8_MOE_BOUND", "256"))
    if quant_type == QuantType.per_1x32 and q_dtype_w == dtypes.i4x2:
        # a16wi4: bf16 activations, int4 weights with groupwise scale
        q_dtype_a = dtypes.bf16
    elif quant_type == QuantType.per_1x32:
        if activation == ActivationType.Swiglu and gate_mode == GateMode.SEPARATED:
            q_dtype_a = dtypes.bf16 if M < _SWIGLU_MXFP4_BF16_BOUND else dtypes.fp4x2
        elif activation == ActivationType.Swiglu or gate_mode == GateMode.INTERLEAVE:
            if get_gfx() != "gfx950" or M < bf16_fp8_bound:
                q_dtype_a = dtypes.bf16
            else:
                q_dtype_a = dtypes.fp8
        else:
            q_dtype_a = dtypes.fp4x2

    metadata = get_2stage_cfgs(
        get_padded_M(M),  # consider token_num > 1024 as prefill
        model_dim,
        inter_dim,
        E,
        topk,
        dtype,
        q_dtype_a,
        q_dtype_w,
        quant_type,
        isG1U1,
        activation,
        doweight_stage1,
        hidden_pad,
        intermediate_pad,
        isShuffled,
        gate_mode,
        is_ep=expert_mask is not None,
    )

    block_size_M = metadata.block_m if block_size_M is None else block_size_M
    # Ensure block_size_M is int (metadata.block_m from CSV may be float)
    if block_size_M is not None:
        block_size_M = int(block_size_M)
    stage1_func = getattr(metadata.stage1, "func", metadata.stage1)
    need_bias_support = _needs_swiglu_bias_support(dtype, quant_type)
    need_local_topk_ids = (
        not metadata.run_1stage
        and need_bias_support
        and metadata.has_bias
        and metadata.ksplit > 1
        and stage1_func in (_flydsl_stage1_wrapper, cktile_moe_stage1)
        and expert_mask is not None
    )
    assert (
        not metadata.flat or get_gfx() == "gfx950"
    ), f"FLAT fmoe asm kernels are gfx950-only; refusing to launch on {get_gfx()}. "
    sorting_ret = moe_sorting(
        topk_ids,
        topk_weight,
        global_E,
        model_dim,
        dtype,
        block_size_M,
        expert_mask,
        num_local_tokens,
        moe_sorting_dispatch_policy,
        return_local_topk_ids=need_local_topk_ids,
        accumulate=not is_flydsl_stage2_reduce(metadata.stage2),
        flat=metadata.flat,
    )
    if need_local_topk_ids:
        (
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            moe_buf,
            local_topk_ids,
        ) = sorting_ret
    else:
        sorted_ids, sorted_weights, sorted_expert_ids, num_valid_ids, moe_buf = (
            sorting_ret
        )
        local_topk_ids = None

    if metadata.run_1stage:
        return metadata.stage1(
            hidden_states,
            w1,
            w2,
            topk,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            moe_buf,
            isG1U1,
            block_size_M,
            q_dtype_a=q_dtype_a,
            q_dtype_w=q_dtype_w,
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            a1_scale=a1_scale,
            a2_scale=a2_scale,
            num_local_tokens=num_local_tokens,
            M=M,
            device=topk_ids.device,
            doweight_stage1=doweight_stage1,
        )
    else:
        return fused_moe_2stages(
            hidden_states,
            w1,
            w2,
            topk,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            moe_buf,
            isG1U1,
            block_size_M,
            activation=activation,
            quant_type=quant_type,
            doweight_stage1=doweight_stage1,
            q_dtype_a=q_dtype_a,
            q_dtype_w=q_dtype_w,
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            a1_scale=a1_scale,
            a2_scale=a2_scale,
            num_local_tokens=num_local_tokens,
            # following for cktile support
            hidden_pad=hidden_pad,
            intermediate_pad=intermediate_pad,
            bias1=bias1,
            bias2=bias2,
            topk_ids=local_topk_ids if local_topk_ids is not None else topk_ids,
            topk_weights=topk_weight,
            # only for flydsl dsv4
            swiglu_limit=swiglu_limit,
            gate_mode=gate_mode,
            expert_mask=expert_mask,
        )


def fused_moe_1stage(
    hidden_states,
    w1,  # [expert(local_expert:EP), inter_dim*2, dim] N,K
    w2,  # [expert(local_expert:EP), dim, inter_dim]
    topk,
    sorted_ids,
    sorted_weights,
    sorted_expert_ids,
    num_valid_ids,
    moe_buf,
    isG1U1,
    block_size_M=32,
    activation=ActivationType.Silu,
    quant_type=QuantType.No,
    xbf16=False,
    kernelName: str = "",
    # following for quant
    q_dtype_a=None,
    q_dtype_w=None,
    w1_scale=None,  # [expert(local_expert:EP), inter_dim, 1]
    w2_scale=None,  # [expert(local_expert:EP), model_dim, 1]
    a1_scale=None,  # [expert(local_expert:EP), 1, model_dim]
    a2_scale=None,  # [expert(local_expert:EP), 1, inter_dim]
    num_local_tokens: Optional[torch.tensor] = None,
    M: int = None,
    device=None,
    doweight_stage1: bool = None,
):
    if quant_type == QuantType.No and activation == ActivationType.Silu and not isG1U1:
        # pure bf16
        aiter.fmoe(
            moe_buf,
            hidden_states,
            w1,
            w2,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            topk,
        )
    elif quant_type == QuantType.per_Token and doweight_stage1 and isG1U1:
        a8_type = w1.dtype
        _, model_dim, _ = w2.shape

        a8 = torch.empty((M, model_dim), dtype=a8_type, device=device)
        a8_scale = torch.empty(M, dtype=dtypes.fp32, device=device)
        aiter.dynamic_per_token_scaled_quant(a8, hidden_states, a8_scale)

        aiter.fmoe_g1u1_tkw1(
            moe_buf,
            a8,
            w1,
            w2,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            topk,
            a8_scale,
            w1_scale,
            w2_scale,
            kernelName,
            a2_scale,
            activation,
        )
    else:
        if xbf16:
            # xquant happens inside the asm kernel for per_1x128
            a1 = hidden_states
            a1_scale = torch.empty(0, device="cuda")
        else:
            quant_func = get_quant(quant_type)
            if hidden_states.dtype != q_dtype_a:
                if quant_type == QuantType.per_1x128:
                    quant_func = functools.partial(quant_func, transpose_scale=True)
                a1, a1_scale = quant_func(
                    hidden_states,
                    scale=a1_scale,
                    quant_dtype=q_dtype_a,
                    num_rows=num_local_tokens,
                )
            else:
                assert (
                    a1_scale is not None or quant_type == QuantType.No
                ), "a1_scale must be provided for quantized input for fused_moe"
                a1 = hidden_states
                if quant_type == QuantType.per_1x128:
                    scale_t = torch.empty_like(a1_scale)
                    aiter.partial_transpose(
                        scale_t, a1_scale, num_rows=num_local_tokens
                    )
                    a1_scale = scale_t

        token_num = hidden_states.shape[0]
        E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)
        if quant_type == QuantType.per_1x32:
            a1_scale = mxfp4_moe_sort_fwd(
                a1_scale,
                sorted_ids=sorted_ids,
                num_valid_ids=num_valid_ids,
                token_num=token_num,
                cols=model_dim,
            )
            w1_scale = w1_scale.view(E, -1)
            w2_scale = w2_scale.view(E, -1)

        if quant_type == QuantType.per_1x128:
            fmoe_func = functools.partial(
                aiter.fmoe_fp8_blockscale_g1u1,
                fc_scale_blkn=128,
                fc_scale_blkk=128,
                block_size_M=block_size_M,
            )
        elif isG1U1:
            fmoe_func = aiter.fmoe_g1u1
        else:
            aiter.fmoe_int8_g1u0(
                moe_buf,
                a1,
                w1,
                w2,
                sorted_ids,
                sorted_weights,
                sorted_expert_ids,
                num_valid_ids,
                topk,
                a1_scale,
                w1_scale,
                w2_scale,
                fc2_smooth_scale=None,
                activation=activation,
            )
            return moe_buf

        fmoe_func(
            moe_buf,
            a1,
            w1,
            w2,
            sorted_ids,
            sorted_weights,
            sorted_expert_ids,
            num_valid_ids,
            topk,
            a1_scale,
            w1_scale,
            w2_scale,
            kernelName,
            fc2_smooth_scale=None,
            activation=activation,
        )
    return moe_buf


@functools.lru_cache(maxsize=2048)
def get_block_size_M(token, topk, expert, inter_dim):
    cu_num = get_cu_num()
    tileN = 128
    tgN = (inter_dim + tileN - 1) // tileN
    support_list = [32, 64, 128]

    tmp = []
    for el in support_list:
        max_num_tokens = token * topk + expert * el - topk
        tg_num = tgN * (max_num_tokens + el - 1) // el
        rnd = (tg_num + cu_num - 1) // cu_num
        empty = cu_num - tg_num % cu_num
        tmp.append((rnd, empty, el))
    return sorted(tmp, key=lambda x: x[:2])[0][-1]


@functools.lru_cache(maxsize=2048)
def use_nt(token, topk, e):
    use_nt = int(os.environ.get("AITER_USE_NT", "-1"))
    if use_nt != -1:
        return bool(use_nt)
    return (token * topk // e) < 64


@functools.lru_cache(maxsize=2048)
def get_ksplit(token, topk, expert, inter_dim, model_dim):
    aiter_ksplit = int(os.environ.get("AITER_KSPLIT", "0"))
    if aiter_ksplit != 0:
        return aiter_ksplit
    # only for moe_blk gemm1 a8w8 decode scenario
    if token * topk > expert:
        return 0
    cu_num = get_cu_num()
    tileN = 128

    tgM = token * topk  # decode tile num
    tgN = (inter_dim + tileN - 1) // tileN

    tg_num = tgN * tgM
    # if all cu already active
    if tg_num >= cu_num:
        return 0
    tilek = 256
    split_max = (cu_num + tg_num - 1) // tg_num
    # at least split = 2
    for i in reversed(range(2, split_max + 1)):
        if (model_dim % i == 0) and ((model_dim // i) % tilek == 0):
            return i
    return 0


cfg_2stages = None
# fmt: off
fused_moe_1stage_dict = {
    "gfx942":
    {
        # activation,                    quant_type,        dtype,    q_dtype_a,    q_dtype_w,   isG1U1,    doweight_stage1,      API
        (ActivationType.Silu,          QuantType.No,  dtypes.bf16,   dtypes.bf16,   dtypes.bf16,   False,   False) : aiter.fmoe,
        (ActivationType.Silu,          QuantType.No,  dtypes.fp16,   dtypes.fp16,   dtypes.fp16,   False,   False) : aiter.fmoe,
        (ActivationType.Gelu,   QuantType.per_Token,  dtypes.bf16,    dtypes.fp8,   dtypes.i4x2,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Silu,    QuantType.per_1x32,  dtypes.bf16,  dtypes.fp4x2,  dtypes.fp4x2,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Silu,   QuantType.per_Token,  dtypes.bf16,     dtypes.i8,     dtypes.i8,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Gelu,   QuantType.per_Token,  dtypes.bf16,     dtypes.i8,     dtypes.i8,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Silu,   QuantType.per_Token,  dtypes.bf16,    dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Gelu,   QuantType.per_Token,  dtypes.bf16,    dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Silu,   QuantType.per_1x128,  dtypes.bf16,    dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Silu,   QuantType.per_Token,  dtypes.bf16,     dtypes.i8,     dtypes.i8,   False,   False) : aiter.fmoe_int8_g1u0,
        (ActivationType.Gelu,   QuantType.per_Token,  dtypes.bf16,     dtypes.i8,     dtypes.i8,   False,   False) : aiter.fmoe_int8_g1u0,
    },
    "gfx950":
    {
        (ActivationType.Silu,    QuantType.per_1x32,   dtypes.bf16,   dtypes.fp4x2,  dtypes.fp4x2,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Silu,   QuantType.per_1x128,   dtypes.bf16,     dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_fp8_blockscale_g1u1,
        (ActivationType.Gelu,   QuantType.per_1x128,   dtypes.bf16,     dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_fp8_blockscale_g1u1,
        (ActivationType.Silu,   QuantType.per_Token,   dtypes.bf16,    dtypes.bf16,   dtypes.bf16,   False,   False) : aiter.fmoe,
        (ActivationType.Silu,   QuantType.per_Token,   dtypes.bf16,     dtypes.fp8,    dtypes.fp8,    True,   True)  : aiter.fmoe_g1u1_tkw1,
        (ActivationType.Silu,   QuantType.per_Token,   dtypes.bf16,     dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_g1u1,
        (ActivationType.Gelu,   QuantType.per_Token,   dtypes.bf16,     dtypes.fp8,    dtypes.fp8,    True,   False) : aiter.fmoe_g1u1,
    }
}
# fmt: on

quant_remap = {QuantType.per_128x128: QuantType.per_1x128}


def nextPow2(n):
    if n <= 1:
        return 1
    return 1 << (n - 1).bit_length()


_PADDED_M_TIERS = [32768, 131072]


def get_padded_M(M):
    if M < _PADDED_M_TIERS[0]:
        return nextPow2(M)
    for tier in reversed(_PADDED_M_TIERS):
        if M >= tier:
            return tier
    return _PADDED_M_TIERS[0]


@dataclass
class MOEMetadata:
    stage1: Callable
    stage2: Callable
    block_m: int
    ksplit: int
    run_1stage: bool = False
    has_bias: bool = False
    use_non_temporal_load: bool = True
    fuse_quant: str = ""
    stage2_has_bias: bool = False
    flat: bool = False


def _needs_swiglu_bias_support(dtype, quant_type):
    return dtype in [dtypes.bf16, dtypes.fp16] and quant_type == QuantType.per_1x32


def _normalize_bias_for_kernel(
    bias: Optional[torch.Tensor],
) -> Optional[torch.Tensor]:
    if bias is None:
        return bias
    if bias.dtype != torch.float32:
        raise TypeError(f"MoE bias must be fp32, got {bias.dtype}")
    return bias


# TODO: remove this function once kernel handles padding in the runtime
def _get_padding_for_flydsl(
    inter_dim_pad,
    model_dim_pad,
    bias: Optional[torch.Tensor] = None,
):
    if bias is not None:
        return 0, 0
    return inter_dim_pad, model_dim_pad


def _flydsl_stage1_wrapper(
    hidden_states,
    w1,
    w2,
    sorted_token_ids,
    sorted_expert_ids,
    num_valid_ids,
    out,
    topk,
    kernelName="",
    activation=ActivationType.Silu,
    w1_scale=None,
    a1_scale=None,
    sorted_weights=None,
    out_scale=None,
    out_scale_sorted=None,
    bias1=None,
    topk_ids=None,
    swiglu_limit: float = 0.0,
    inter_dim_pad: int = 0,
    model_dim_pad: int = 0,
    **_kwargs,
):
    inter_dim_pad, model_dim_pad = _get_padding_for_flydsl(
        inter_dim_pad, model_dim_pad, bias1
    )
    parsed = aiter.ops.flydsl.moe_kernels.get_flydsl_kernel_params(kernelName)
    if parsed is None:
        raise ValueError(f"Invalid FlyDSL kernel name: {kernelName}")
    act = "swiglu" if activation == ActivationType.Swiglu else "silu"
    _a_scale_one = parsed.get("a_scale_one", False)
    return aiter.ops.flydsl.flydsl_moe_stage1(
        a=hidden_states,
        w1=w1,
        sorted_token_ids=sorted_token_ids,
        sorted_expert_ids=sorted_expert_ids,
        num_valid_ids=num_valid_ids,
        out=out,
        topk=topk,
        tile_m=parsed["tile_m"],
        tile_n=parsed["tile_n"],
        tile_k=parsed["tile_k"],
        a_dtype=parsed["a_dtype"],
        b_dtype=parsed["b_dtype"],
        out_dtype=parsed["out_dtype"],
        act=act,
        w1_scale=w1_scale,
        a1_scale=a1_scale,
        sorted_weights=sorted_weights,
        use_async_copy=True,
        k_batch=parsed.get("k_batch", 1),
        waves_per_eu=parsed.get("waves_per_eu", 3),
        b_nt=parsed.get("b_nt", 2),
        gate_mode=parsed.get("gate_mode", "separated"),
        inter_dim_pad=inter_dim_pad,
        model_dim_pad=model_dim_pad,
        bias=_normalize_bias_for_kernel(bias1),
        topk_ids=topk_ids,
        a_scale_one=_a_scale_one,
        xcd_swizzle=parsed.get("xcd_swizzle", 0),
        swiglu_limit=swiglu_limit,
    )


def _flydsl_stage2_wrapper(
    inter_states,
    w1,
    w2,
    sorted_token_ids,
    sorted_expert_ids,
    num_valid_ids,
    out,
    topk,
    kernelName="",
    w2_scale=None,
    a2_scale=None,
    sorted_weights=None,
    bias2=None,
    inter_dim_pad: int = 0,
    model_dim_pad: int = 0,
    expert_mask=None,
    topk_ids=None,
    **_kwargs,
):

    inter_dim_pad, model_dim_pad = _get_padding_for_flydsl(
        inter_dim_pad, model_dim_pad, bias2
    )
    parsed = aiter.ops.flydsl.moe_kernels.get_flydsl_kernel_params(kernelName)
    if parsed is None:
        raise ValueError(f"Invalid FlyDSL kernel name: {kernelName}")
    return aiter.ops.flydsl.flydsl_moe_stage2(
        inter_states=inter_states,
        w2=w2,
        sorted_token_ids=sorted_token_ids,
        sorted_expert_ids=sorted_expert_ids,
        num_valid_ids=num_valid_ids,
        out=out,
        topk=topk,
        tile_m=parsed["tile_m"],
        tile_n=parsed["tile_n"],
        tile_k=parsed["tile_k"],
        a_dtype=parsed["a_dtype"],
        b_dtype=parsed["b_dtype"],
        out_dtype=parsed["out_dtype"],
        mode=parsed.get("mode", "atomic"),
        w2_scale=w2_scale,
        a2_scale=a2_scale,
        sorted_weights=sorted_weights,
        sort_block_m=parsed.get("sort_block_m", 0),
        b_nt=parsed.get("b_nt", 0),
        persist=parsed.get("persist", None),
        inter_dim_pad=inter_dim_pad,
        model_dim_pad=model_dim_pad,
        bias=bias2,
        xcd_swizzle=parsed.get("xcd_swizzle", 0),
        expert_mask=expert_mask,
        topk_ids=topk_ids,
    )


@functools.lru_cache(maxsize=2048)
def get_2stage_cfgs(
    token,
    model_dim,
    inter_dim,
    expert,
    topk,
    dtype,
    q_dtype_a,
    q_dtype_w,
    q_type,
    use_g1u1,
    activation,
    doweight_stage1,
    hidden_pad,
    intermediate_pad,
    is_shuffled=True,
    gate_mode=GateMode.SEPARATED.value,
    is_ep=False,
):
    gate_mode = GateMode(gate_mode)
    _INDEX_COLS = [
        "cu_num",
        "token",
        "model_dim",
        "inter_dim",
        "expert",
        "topk",
        "act_type",
        "dtype",
        "q_dtype_a",
        "q_dtype_w",
        "q_type",
        "use_g1u1",
        "doweight_stage1",
    ]

    def get_cfg_2stages(tune_file):
        import pandas as pd

        df = pd.read_csv(tune_file)
        if "_tag" in df.columns:
            df = df[df["_tag"].fillna("") == ""]

        # Primary dict: keep original act_type for exact-match lookup.
        df_primary = df.copy()
        dup_mask = df_primary.duplicated(subset=_INDEX_COLS, keep="first")
        if dup_mask.any():
            logger.warning(
                f"[fused_moe] duplicate tuned rows (primary) in {tune_file}; "
                f"keeping first match for {int(dup_mask.sum())} rows"
            )
            df_primary = df_primary.loc[~dup_mask]
        primary = df_primary.set_index(_INDEX_COLS).to_dict("index")

        # Fallback dict: disable act_type so any activation can match.
        df_fallback = df.copy()
        if "act_type" in df_fallback.columns:
            df_fallback["act_type"] = _ACT_TYPE_DISABLED_KEY
        dup_mask = df_fallback.duplicated(subset=_INDEX_COLS, keep="first")
        if dup_mask.any():
            logger.warning(
                f"[fused_moe] duplicate tuned rows after disabling act_type in {tune_file}; "
                f"keeping first match for {int(dup_mask.sum())} rows"
            )
            df_fallback = df_fallback.loc[~dup_mask]
        fallback = df_fallback.set_index(_INDEX_COLS).to_dict("index")

        return primary, fallback

    _flydsl_fallback_cache = {}

    def get_flydsl_fallback_cfgs(tune_file):
        """Return fallback configs (rows tagged ``flydsl_fallback``)."""
        if tune_file in _flydsl_fallback_cache:
            return _flydsl_fallback_cache[tune_file]
        import pandas as pd

        if not os.path.exists(tune_file):
            _flydsl_fallback_cache[tune_file] = {}
            return {}
        df = pd.read_csv(tune_file)
        if "_tag" not in df.columns:
            _flydsl_fallback_cache[tune_file] = {}
            return {}
        if "act_type" in df.columns:
            df["act_type"] = _ACT_TYPE_DISABLED_KEY
        fb_df = df[df["_tag"] == "flydsl_fallback"]
        if fb_df.empty:
            _flydsl_fallback_cache[tune_file] = {}
            return {}
        dup_mask = fb_df.duplicated(subset=_INDEX_COLS, keep="first")
        if dup_mask.any():
            logger.warning(
                f"[fused_moe] duplicate fallback rows after disabling act_type in {tune_file}; "
                f"keeping first match for {int(dup_mask.sum())} rows"
            )
            fb_df = fb_df.loc[~dup_mask]
        result = fb_df.set_index(_INDEX_COLS).to_dict("index")
        _flydsl_fallback_cache[tune_file] = result
        return result

    global cfg_2stages
    config_path = os.path.dirname(AITER_CONFIGS.AITER_CONFIG_FMOE_FILE)
    tune_file = AITER_CONFIGS.AITER_CONFIG_FMOE_FILE
    untune_file = os.path.join(config_path, "untuned_fmoe.csv")
    profile_file = os.path.join(config_path, "profile_fmoe.csv")
    if cfg_2stages is None:
        cfg_2stages = get_cfg_2stages(tune_file)
    cu_num = get_cu_num()
    # EP convention: callers append one always-masked fake-expert slot to
    # topk_ids, so runtime `topk` is routed_topk + 1. Tuned configs are keyed
    # on routed_topk; strip the fake slot before building the lookup key.
    topk -= int(is_ep)
    keys = (
        cu_num,
        token,
        model_dim,
        inter_dim,
        expert,
        topk,
        activation,
        str(dtype),
        str(q_dtype_a),
        str(q_dtype_w),
        str(q_type),
        use_g1u1,
        doweight_stage1,
    )
    keys_disabled = (
        cu_num,
        token,
        model_dim,
        inter_dim,
        expert,
        topk,
        _ACT_TYPE_DISABLED_KEY,
        str(dtype),
        str(q_dtype_a),
        str(q_dtype_w),
        str(q_type),
        use_g1u1,
        doweight_stage1,
    )

    def MainFunc():
        with open(untune_file, "a") as f:
            if os.path.getsize(untune_file) == 0:
                f.write(
                    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1"
                )
            q_dtype_ws = q_dtype_w if q_dtype_w != torch.uint32 else "torch.int4"
            f.write(
                f"\n{token},{model_dim},{inter_dim},{expert},{topk},{activation},{dtype},{q_dtype_a},{q_dtype_ws},{q_type},{int(use_g1u1)},{int(doweight_stage1)}"
            )
        logger.info("\033[34m Start tuning fmoe")
        os.system(
            f"{PY} {AITER_CSRC_DIR}/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py -i {untune_file} -o {tune_file} -o2 {profile_file} --last"
        )

    def FinalFunc():
        logger.info(
            f"[Hint] tuned configs are saved in {tune_file}, you can set AITER_CONFIG_FMOE to this file to use tuned configs"
        )
        logger.info("\033[0m")

    def _lookup_cfg(c2s):
        if not c2s:
            return None
        primary, fallback = c2s
        result = primary.get(keys, None)
        if result is None:
            result = fallback.get(keys_disabled, None)
        # Tier fallback: if current tier not found, try smaller tiers in descending order
        if result is None and token > _PADDED_M_TIERS[0]:
            tier_idx = _PADDED_M_TIERS.index(token) if token in _PADDED_M_TIERS else -1
            for fallback_tier in reversed(_PADDED_M_TIERS[:tier_idx]):
                keys_fb = (keys[0], fallback_tier) + keys[2:]
                keys_fb_disabled = (keys_disabled[0], fallback_tier) + keys_disabled[2:]
                result = primary.get(keys_fb, None)
                if result is None:
                    result = fallback.get(keys_fb_disabled, None)
                if result is not None:
                    break
        return result

    cfg = _lookup_cfg(cfg_2stages)
    if cfg is None and os.environ.get("AITER_ONLINE_TUNE", "0") == "1":
        lock_name = re.sub(r"[^\w.\-]", "_", str(keys))
        lock_path = os.path.join(bd_dir, f"lock_fmoe_tune_{lock_name}")
        mp_lock(lock_path, MainFunc=MainFunc, FinalFunc=FinalFunc)
        cfg_2stages = get_cfg_2stages(tune_file)
        cfg = _lookup_cfg(cfg_2stages)
        if cfg is None:
            logger.warning(f"Fmoe tuning not support for {keys}")
    if cfg is not None and not is_flydsl_available():
        kn1 = str(cfg.get("kernelName1", ""))
        kn2 = str(cfg.get("kernelName2", ""))
        if kn1.startswith("flydsl_") or kn2.startswith("flydsl_"):
            fallback_cfgs = get_flydsl_fallback_cfgs(tune_file)
            fallback = fallback_cfgs.get(keys, None) or fallback_cfgs.get(
                keys_disabled, None
            )
            if fallback is not None:
                cfg = fallback
                logger.info(
                    f"[fused_moe] flydsl unavailable, using fallback config for {keys}"
                )
            else:
                cfg = None
                logger.warning(
                    f"[fused_moe] flydsl unavailable and no fallback for {keys}, "
                    "using default heuristics"
                )

    use_non_temporal_load = False
    if cfg is None or int(os.environ.get("AITER_BYPASS_TUNE_CONFIG", "0")):
        ksplit = 0
        kernelName1 = ""
        kernelName2 = ""
        run_1stage = False
        run_1stage_xbf16 = False
        # No tuned config => default host moe_sort. For FLAT, run tuner and set flat=1.
        cfg_flat = False
        if (
            activation,
            q_type,
            dtype,
            q_dtype_a,
            q_dtype_w,
            use_g1u1,
            doweight_stage1,
        ) in fused_moe_1stage_dict[get_gfx()]:
            if q_type == QuantType.per_1x128:
                # for fp8 blockscale, ck has better performance so disable assembly kernel
                run_1stage = token > 32 and (inter_dim % 128 == 0)
            elif q_type == QuantType.per_Token and q_dtype_w == dtypes.i8:
                run_1stage = token > 32
            elif q_type == QuantType.per_Token and q_dtype_w == dtypes.fp8:
                run_1stage = token > 16 or inter_dim % 128 != 0
            elif q_type != QuantType.per_1x32:
                run_1stage = token < 256

            if run_1stage and q_type == QuantType.per_1x128 and get_gfx() == "gfx950":
                run_1stage_xbf16 = int(os.environ.get("AITER_XBFLOAT16", "0")) == 1

        block_m = (
            BLOCK_SIZE_M
            if run_1stage
            else (
                (64 if token > 32 else 16)
                if q_type == QuantType.per_1x128
                else get_block_size_M(token, topk, expert, inter_dim)
            )
        )
        ksplit = (
            ksplit
            if (run_1stage)
            else (
                get_ksplit(token, topk, expert, inter_dim, model_dim)
                if q_type in [QuantType.per_1x128, QuantType.per_1x32]
                else ksplit
            )
        )
        use_non_temporal_load = use_nt(token, topk, expert)
        aiter.logger.info(
            f"run_1stage = {run_1stage}, xbf16 = {run_1stage_xbf16}, ksplit = {ksplit} q_type = {q_type} block_m = {block_m} use_nt = {use_non_temporal_load}, estimated_m_per_expert = {token * topk // expert}"
        )
    else:
        block_m = cfg["block_m"]
        if int(os.environ.get("AITER_KSPLIT", "0")) != -1:
            ksplit = cfg["ksplit"]
        else:
            ksplit = 0
        kernelName1 = cfg["kernelName1"]
        kernelName2 = cfg["kernelName2"]
        run_1stage = cfg.get("run_1stage", False)
        if not is_shuffled and not run_1stage:
            logger.warning(
                f"[fused_moe] tuned config found for {keys} but is_shuffled=False. "
                "Tuned kernels are optimized for preshuffled weights (preshuffle_on). "
                "Running with preshuffle_off may produce incorrect results."
            )
        if "xbf16" in cfg:
            run_1stage_xbf16 = run_1stage and bool(int(cfg["xbf16"]))
        else:
            run_1stage_xbf16 = run_1stage and "blockscaleBf16" in str(kernelName1)
        if "flat" in cfg:
            cfg_flat = run_1stage and bool(int(cfg["flat"]))
        else:
            cfg_flat = False

    tag = f"({kernelName1=}, {kernelName2=})"
    logger.info(
        f"[fused_moe] using {'1stage' if run_1stage else '2stage'}{' xbf16' if run_1stage_xbf16 else ''} {'default' if cfg is None else tag} for {keys} "
    )

    def get_block_m() -> int:
        if q_dtype_a == dtypes.fp8:
            return 32
        else:
            return 16 if token < 2048 else 32 if token < 16384 else 64

    if run_1stage:
        # never hard code block_m for 1-stage since it can be tuned by kernel itself, and we have different heuristics for different quant types
        # # TODO: enable this approach for other quant types and archs
        # if q_type == QuantType.per_1x128 and get_gfx() == "gfx950":
        #     tkn_per_epr = token * topk // expert
        #     block_m = 64 if tkn_per_epr > 32 else block_m
        return MOEMetadata(
            functools.partial(
                fused_moe_1stage,
                kernelName=kernelName1,
                activation=activation,
                quant_type=q_type,
                xbf16=run_1stage_xbf16,
            ),
            None,
            block_m,
            ksplit,
            run_1stage,
            flat=cfg_flat,
        )
    is_flydsl1 = bool(kernelName1) and kernelName1.startswith("flydsl_")
    is_flydsl2 = bool(kernelName2) and kernelName2.startswith("flydsl_")
    is_cktile2 = bool(kernelName2) and kernelName2.startswith("cktile_")
    if (is_flydsl1 or is_flydsl2) and is_flydsl_available():
        enable_bias = (
            _needs_swiglu_bias_support(dtype, q_type) and q_dtype_w == dtypes.fp4x2
        )
        _s1_fp4q = is_flydsl1 and "_fp4" in kernelName1.split("_t")[-1]
        if is_flydsl1:
            stage1_func = functools.partial(
                _flydsl_stage1_wrapper,
                kernelName=kernelName1,
                activation=activation,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            )
        else:
            stage1_func = functools.partial(
                ck_moe_stage1,
                kernelName=kernelName1,
                activation=activation,
                quant_type=q_type,
                dtype=dtype,
                splitk=ksplit,
                use_non_temporal_load=use_non_temporal_load,
            )

        if is_flydsl2:
            stage2_func = functools.partial(
                _flydsl_stage2_wrapper,
                kernelName=kernelName2,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            )
        elif is_cktile2:
            stage2_func = functools.partial(
                cktile_moe_stage2,
                n_pad_zeros=hidden_pad // 64 * 64,
                k_pad_zeros=intermediate_pad // 128 * 128,
                activation=activation,
            )
        else:
            stage2_func = functools.partial(
                aiter.ck_moe_stage2_fwd,
                kernelName=kernelName2,
                activation=activation,
                quant_type=q_type,
                use_non_temporal_load=use_non_temporal_load,
            )
        _s1_fp8q = is_flydsl1 and "_fp8" in kernelName1.split("_t")[-1]
        _fuse_quant = "fp8" if _s1_fp8q else ("fp4" if _s1_fp4q else "")
        return MOEMetadata(
            stage1_func,
            stage2_func,
            block_m,
            int(ksplit),
            run_1stage,
            has_bias=enable_bias and is_flydsl1,
            fuse_quant=_fuse_quant,
            stage2_has_bias=enable_bias and is_flydsl2,
        )
    if (
        gate_mode != GateMode.SEPARATED
        and dtype in [dtypes.bf16, dtypes.fp16]
        and q_type == QuantType.per_1x32
        and activation == ActivationType.Swiglu
    ):
        return MOEMetadata(
            functools.partial(
                cktile_moe_stage1,
                n_pad_zeros=intermediate_pad // 64 * 64 * (2 if use_g1u1 else 1),
                k_pad_zeros=hidden_pad // 128 * 128,
                activation=activation,
                split_k=1,
                dtype=dtype,
            ),
            functools.partial(
                cktile_moe_stage2,
                n_pad_zeros=hidden_pad // 64 * 64,
                k_pad_zeros=intermediate_pad // 128 * 128,
                activation=activation,
            ),
            get_block_m(),
            ksplit,
            run_1stage=False,
            has_bias=True,
            stage2_has_bias=True,
        )
    swiglu_mxfp4_bf16_cktile = (
        q_type == QuantType.per_1x32
        and activation == ActivationType.Swiglu
        and q_dtype_a in [dtypes.bf16, dtypes.fp16]
        and q_dtype_w == dtypes.fp4x2
        and is_shuffled
    )
    if (
        q_type == QuantType.per_1x32
        and q_dtype_w == dtypes.i4x2
        and is_flydsl_available()
    ):
        # Heuristic kernel dispatch for a16wi4 (bf16 activations, packed int4 weights
        # with groupwise scale). Tile sizes and k-split are chosen based on problem
        # dimensions to balance occupancy and memory bandwidth:
        #   - _tile_m: scales with token count to improve utilization at larger batch sizes
        #   - _tile_n/_tile_k: fixed at 128, tuned for int4 weight packing granularity
        #   - _ksplit: partitions the K dimension across workgroups for large reductions
        _out_str = "bf16"
        _tile_m = 16 if token < 2048 else 32 if token < 16384 else 64
        _tile_n = 128
        _tile_k = 128
        _ksplit = get_ksplit(token, topk, expert, inter_dim, model_dim)
        from aiter.ops.flydsl.moe_kernels import flydsl_kernel_name

        kn1 = flydsl_kernel_name(1, "bf16", "int4", _out_str, _tile_m, _tile_n, _tile_k)
        if _ksplit > 1:
            kn1 += f"_kb{_ksplit}"
        kn2 = flydsl_kernel_name(
            2, "bf16", "int4", _out_str, _tile_m, _tile_n, _tile_k, "atomic"
        )
        return MOEMetadata(
            functools.partial(
                _flydsl_stage1_wrapper,
                kernelName=kn1,
                activation=activation,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            ),
            functools.partial(
                _flydsl_stage2_wrapper,
                kernelName=kn2,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            ),
            _tile_m,
            _ksplit,
            False,
        )
    # Debug: AITER_FLYDSL_FORCE=1 is for debug use.
    _flydsl_force = os.environ.get("AITER_FLYDSL_FORCE", "1") == "1"
    use_mxfp4_flydsl = (
        dtype in [dtypes.bf16, dtypes.fp16]
        and q_type == QuantType.per_1x32
        and (activation == ActivationType.Swiglu or _flydsl_force)
        and q_dtype_a in (dtypes.fp4x2, dtypes.fp8)
        and q_dtype_w == dtypes.fp4x2
        and is_shuffled
        and use_g1u1
        and not doweight_stage1
        and is_flydsl_available()
    )
    if use_mxfp4_flydsl:
        from aiter.ops.flydsl.moe_kernels import (
            flydsl_kernel_name,
            get_flydsl_kernel_params,
        )

        _out_type = "bf16" if dtype == dtypes.bf16 else "f16"
        # a-dtype "fp4" => a4w4 fp4/fp4; "fp8" => a8w4 fp8/fp4 FlyDSL family.
        _a_type = "fp4" if q_dtype_a == dtypes.fp4x2 else "fp8"
        if token < 2048:
            _tile_m = 32
            _base_kn1 = flydsl_kernel_name(1, _a_type, "fp4", _out_type, 32, 128, 256)
            _base_kn2 = flydsl_kernel_name(
                2, _a_type, "fp4", _out_type, 32, 128, 256, "atomic"
            )
            kn1 = f"{_base_kn1}_w2"
            kn2 = f"{_base_kn2}_bnt2"
        elif token < 4096:
            _tile_m = 64
            _base_kn1 = flydsl_kernel_name(1, _a_type, "fp4", _out_type, 64, 128, 256)
            _base_kn2 = flydsl_kernel_name(
                2, _a_type, "fp4", _out_type, 64, 128, 256, "atomic"
            )
            kn1 = f"{_base_kn1}_w3_bnt0"
            kn2 = _base_kn2
        elif token < 16384:
            _tile_m = 128
            _base_kn1 = flydsl_kernel_name(1, _a_type, "fp4", _out_type, 128, 128, 256)
            _base_kn2 = flydsl_kernel_name(
                2, _a_type, "fp4", _out_type, 128, 128, 256, "atomic"
            )
            kn1 = f"{_base_kn1}_w2_bnt0"
            kn2 = _base_kn2
        else:
            _tile_m = 64
            _base_kn1 = flydsl_kernel_name(1, _a_type, "fp4", _out_type, 64, 128, 256)
            _base_kn2 = flydsl_kernel_name(
                2, _a_type, "fp4", _out_type, 64, 128, 256, "atomic"
            )
            kn1 = f"{_base_kn1}_w4_bnt0"
            kn2 = _base_kn2

        # fp8 stage1 kernel names always carry a "_gui" suffix
        # (moe_kernels.py:114-115). Append it before the lookup so the fp8
        # variants resolve; fp4 names are unchanged.
        if _a_type == "fp8":
            kn1 = f"{kn1}_gui"
            _base_kn1 = f"{_base_kn1}_gui"
        if get_flydsl_kernel_params(kn1) is None:
            kn1 = _base_kn1
        if get_flydsl_kernel_params(kn2) is None:
            kn2 = _base_kn2

        logger.warning(
            f"[fused_moe] no tuned FlyDSL config for {keys}, "
            f"using heuristic FlyDSL fallback ({kn1=}, {kn2=})"
        )
        enable_bias = _needs_swiglu_bias_support(dtype, q_type)
        return MOEMetadata(
            functools.partial(
                _flydsl_stage1_wrapper,
                kernelName=kn1,
                activation=activation,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            ),
            functools.partial(
                _flydsl_stage2_wrapper,
                kernelName=kn2,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            ),
            _tile_m,
            -1,  # split_k = -1
            False,
            has_bias=enable_bias,
            stage2_has_bias=enable_bias,
        )
    if (
        dtype in [dtypes.bf16, dtypes.fp16]
        and q_type == QuantType.per_1x32
        and q_dtype_w in [dtypes.fp4x2]
        and is_shuffled
        and not (activation == ActivationType.Swiglu and q_dtype_a == dtypes.fp4x2)
        and (ksplit > 1 or swiglu_mxfp4_bf16_cktile)
    ):
        # GPT-OSS Swiglu can use bf16/fp16 activations for small batches while
        # keeping the generic preshuffled fp4 weights. CK2stages has no
        # heuristic kernel for that A16W4 combination, so use CK-Tile.
        # Use CK-Tile's split-k epilogue for the generic preshuffled MXFP4
        # layout. The non-split gate/up epilogue is reserved for legacy A16W4.
        _min_split_k = 2 if swiglu_mxfp4_bf16_cktile else 1
        _split_k = max(int(ksplit), _min_split_k)
        _cktile_block_m = 16 if token < 2048 else 32 if token < 16384 else 64
        return MOEMetadata(
            functools.partial(
                cktile_moe_stage1,
                n_pad_zeros=intermediate_pad // 64 * 64 * (2 if use_g1u1 else 1),
                k_pad_zeros=hidden_pad // 128 * 128,
                activation=activation,
                split_k=_split_k,
                dtype=dtype,
                post_activation_layout=(
                    "standard" if swiglu_mxfp4_bf16_cktile else "auto"
                ),
            ),
            functools.partial(
                cktile_moe_stage2,
                n_pad_zeros=hidden_pad // 64 * 64,
                k_pad_zeros=intermediate_pad // 128 * 128,
                activation=activation,
            ),
            _cktile_block_m,
            _split_k,
            run_1stage,
            has_bias=activation == ActivationType.Swiglu,
            stage2_has_bias=activation == ActivationType.Swiglu,
        )

    if (kernelName1 and "ck2stages" in kernelName1) or (
        not kernelName1
        and (
            (q_type == QuantType.per_1x128 and doweight_stage1)
            or q_dtype_w
            in [
                dtypes.bf16,
                dtypes.fp16,
                torch.uint32,
                dtypes.fp4x2,
                dtypes.fp8,
            ]
        )
    ):
        if kernelName2 and kernelName2.startswith("flydsl_") and is_flydsl_available():
            stage2_func = functools.partial(
                _flydsl_stage2_wrapper,
                kernelName=kernelName2,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            )
        elif kernelName2 and kernelName2.startswith("cktile_"):
            stage2_func = functools.partial(
                cktile_moe_stage2,
                n_pad_zeros=hidden_pad // 64 * 64,
                k_pad_zeros=intermediate_pad // 128 * 128,
                activation=activation,
            )
        else:
            stage2_func = functools.partial(
                aiter.ck_moe_stage2_fwd,
                kernelName=kernelName2,
                activation=activation,
                quant_type=q_type,
                use_non_temporal_load=use_non_temporal_load,
            )
        return MOEMetadata(
            functools.partial(
                ck_moe_stage1,
                kernelName=kernelName1,
                activation=activation,
                quant_type=q_type,
                dtype=dtype,
                splitk=int(ksplit),
                use_non_temporal_load=use_non_temporal_load,
            ),
            stage2_func,
            block_m,
            int(ksplit),
            run_1stage,
        )

    # TODO: remove when stage2 support more size
    tmpList = [16, 32, 64, 128]
    if block_m not in tmpList:
        tag = ""
        block_m = ([el for el in tmpList if block_m < el] + [128])[0]

    if kernelName2 and kernelName2.startswith("cktile_"):
        stage2_func = functools.partial(
            cktile_moe_stage2,
            n_pad_zeros=hidden_pad // 64 * 64,
            k_pad_zeros=intermediate_pad // 128 * 128,
            activation=activation,
        )
    else:
        stage2_func = functools.partial(
            aiter.ck_moe_stage2_fwd,
            kernelName=kernelName2,
            activation=activation,
            quant_type=q_type,
            use_non_temporal_load=use_non_temporal_load,
        )
    return MOEMetadata(
        functools.partial(
            asm_stage1,
            kernelName=kernelName1,
            activation=activation,
            quant_type=q_type,
        ),
        stage2_func,
        block_m,
        ksplit,
        run_1stage,
    )


def fused_moe_2stages(
    hidden_states,
    w1,  # [expert(local_expert:EP), inter_dim*2, dim] N,K
    w2,  # [expert(local_expert:EP), dim, inter_dim]
    topk,
    sorted_ids,
    sorted_weights,
    sorted_expert_ids,
    num_valid_ids,
    moe_out,
    isG1U1,
    block_size_M,
    activation=ActivationType.Silu,
    quant_type=QuantType.No,
    doweight_stage1=False,
    # following for quant
    q_dtype_a=None,
    q_dtype_w=None,
    w1_scale=None,  # [expert(local_expert:EP), inter_dim, 1]
    w2_scale=None,  # [expert(local_expert:EP), model_dim, 1]
    a1_scale=None,  # [expert(local_expert:EP), 1, model_dim]
    a2_scale=None,  # [expert(local_expert:EP), 1, inter_dim]
    num_local_tokens: Optional[torch.tensor] = None,
    # following for cktile support
    hidden_pad=0,
    intermediate_pad=0,
    bias1=None,
    bias2=None,
    topk_ids=None,
    topk_weights=None,
    swiglu_limit=0.0,
    gate_mode=GateMode.SEPARATED.value,
    expert_mask=None,
):
    quant_func = get_quant(quant_type)
    gate_mode = GateMode(gate_mode)
    token_num, _ = hidden_states.shape
    E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)
    dtype = moe_out.dtype
    device = hidden_states.device
    if moe_out.numel() == 0:
        moe_out = torch.empty((token_num, model_dim), dtype=dtype, device=device)
    is_shuffled = getattr(w1, "is_shuffled", False) or getattr(w2, "is_shuffled", False)
    metadata = get_2stage_cfgs(
        get_padded_M(token_num),  # consider token_num > 1024 as prefill
        model_dim,
        inter_dim,
        E,
        topk,
        dtype,
        q_dtype_a,
        q_dtype_w,
        quant_type,
        isG1U1,
        activation,
        doweight_stage1,
        hidden_pad,
        intermediate_pad,
        is_shuffled,
        gate_mode,
        is_ep=expert_mask is not None,
    )
    if (
        quant_type == QuantType.per_1x32
        and dtype in [dtypes.bf16, dtypes.fp16]
        and w1.dtype == dtypes.fp4x2
        and (
            q_dtype_a in [dtypes.bf16, dtypes.fp16]
            and activation == ActivationType.Swiglu
            or (q_dtype_a in [dtypes.fp4x2] and metadata.ksplit > 1 and is_shuffled)
        )
    ):
        a1 = hidden_states.to(dtype)
        a1_scale = None
    elif (
        quant_type == QuantType.per_1x32
        and dtype in [dtypes.bf16, dtypes.fp16]
        and q_dtype_a == dtypes.fp8
        and w1.dtype == dtypes.fp4x2
    ):
        # a8w4 mxfp8 activations + mxfp4 weights.
        if _MOE_A8W4_BYPASS_QUANT:
            # Debug bypass: skip real quant, feed unit scales.
            a1 = hidden_states.to(dtypes.fp8)
            M = sorted_ids.shape[0]
            a1_scale = torch.ones(
                [M, a1.shape[-1] // 32], dtype=dtypes.fp8_e8m0, device=a1.device
            )
        else:
            # stage1 input is not topk-replicated, so M==token_num and the HIP
            # launcher infers TOPK=1 from input.numel() / (cols * token_num).
            a1, a1_scale = fused_dynamic_mxfp8_quant_moe_sort(
                hidden_states,
                sorted_ids=sorted_ids,
                num_valid_ids=num_valid_ids,
                token_num=token_num,
                topk=topk,
                block_size=block_size_M,
            )

    elif quant_type == QuantType.per_1x32 and w1.dtype == dtypes.i4x2:
        # a16wi4: bf16 activations, int4 weights; no activation quantization needed
        a1 = hidden_states.to(dtype)
        a1_scale = None
    elif quant_type == QuantType.per_1x32:
        if hidden_states.dtype == dtypes.fp4x2 and a1_scale is not None:
            # Input is already quantized to fp4x2 (e.g., from FP4 dispatch),
            # skip re-quantization, only sort the scale
            a1 = hidden_states
            a1_scale = mxfp4_moe_sort_fwd(
                a1_scale,
                sorted_ids=sorted_ids,
                num_valid_ids=num_valid_ids,
                token_num=token_num,
                cols=model_dim,
            )
        else:
            a1, a1_scale = fused_dynamic_mxfp4_quant_moe_sort(
                hidden_states,
                sorted_ids=sorted_ids,
                num_valid_ids=num_valid_ids,
                token_num=token_num,
                topk=topk,
                block_size=block_size_M,
                num_rows=num_local_tokens,
            )
    elif hidden_states.dtype != q_dtype_a:
        if quant_type == QuantType.per_1x128 and metadata.stage1.func is asm_stage1:
            quant_func = functools.partial(quant_func, transpose_scale=True)
        a1, a1_scale = quant_func(
            hidden_states,
            scale=a1_scale,
            quant_dtype=q_dtype_a,
            num_rows=num_local_tokens,
        )
    else:
        assert (
            a1_scale is not None or quant_type == QuantType.No
        ), "a1_scale must be provided for quantized input for fused_moe"
        a1 = hidden_states
    if quant_type == QuantType.per_1x128 and metadata.stage1.func is asm_stage1:
        ratio = a1_scale.element_size() // a1.element_size()
        a2 = torch.empty(
            (token_num + (token_num * ratio + 127) // 128, topk, inter_dim),
            dtype=q_dtype_a,
            device=device,
        )
    else:
        _a2_dtype = dtype
        a2 = torch.empty(
            (token_num, topk, inter_dim),
            dtype=_a2_dtype,
            device=device,
        )
    extra_stage1_args = {}
    extra_stage2_args = {}
    need_bias_support = _needs_swiglu_bias_support(dtype, quant_type)
    stage1_func = getattr(metadata.stage1, "func", metadata.stage1)
    stage2_func = getattr(metadata.stage2, "func", metadata.stage2)
    if not metadata.run_1stage and need_bias_support:
        if metadata.has_bias:
            extra_stage1_args["bias1"] = _normalize_bias_for_kernel(bias1)
            if stage1_func in (_flydsl_stage1_wrapper, cktile_moe_stage1):
                extra_stage1_args["topk_ids"] = topk_ids
        if metadata.stage2_has_bias:
            extra_stage2_args["bias2"] = _normalize_bias_for_kernel(bias2)
    if metadata.stage1.func is _flydsl_stage1_wrapper:
        extra_stage1_args["swiglu_limit"] = swiglu_limit
    # EP: forward expert_mask + topk_ids to the flydsl stage2 wrapper so it can
    # switch to reduce mode and fuse the validity gather in compile_moe_reduction.
    if stage2_func is _flydsl_stage2_wrapper and expert_mask is not None:
        extra_stage2_args["expert_mask"] = expert_mask
        extra_stage2_args["topk_ids"] = topk_ids
    a2 = metadata.stage1(
        a1,
        w1,
        w2,
        sorted_ids,
        sorted_expert_ids,
        num_valid_ids,
        None if metadata.fuse_quant else a2,
        topk,
        block_m=block_size_M,
        a1_scale=a1_scale,
        w1_scale=(
            w1_scale.view(dtypes.fp8_e8m0) if w1.dtype == dtypes.fp4x2 else w1_scale
        ),
        sorted_weights=sorted_weights if doweight_stage1 else None,
        **extra_stage1_args,
    )
    if metadata.fuse_quant == "fp4" and isinstance(a2, tuple):
        a2_raw, a2_scale = a2[0], a2[1]
        _fp4_bytes = token_num * topk * (inter_dim // 2)
        a2 = (
            a2_raw.view(-1)
            .view(torch.uint8)[:_fp4_bytes]
            .view(dtypes.fp4x2)
            .reshape(token_num, topk, -1)
        )
    elif metadata.fuse_quant == "fp8" and isinstance(a2, tuple):
        a2, a2_scale = a2[0], a2[1]
        a2 = a2.view(token_num, topk, -1)
    elif (
        quant_type == QuantType.per_1x32
        and dtype in [dtypes.bf16, dtypes.fp16]
        and w1.dtype == dtypes.fp4x2
        and (
            q_dtype_a in [dtypes.bf16, dtypes.fp16]
            and activation == ActivationType.Swiglu
            or (metadata.ksplit > 1 and is_shuffled)
        )
    ):
        a2_scale = None
    elif (
        quant_type == aiter.QuantType.per_1x32
        and dtype in [dtypes.bf16]
        and q_dtype_a == dtypes.fp8
        and w1.dtype == dtypes.fp4x2
    ):
        if not _MOE_A8W4_BYPASS_QUANT:
            a2 = a2.view(-1, inter_dim)
            a2, a2_scale = fused_dynamic_mxfp8_quant_moe_sort(
                a2,
                sorted_ids=sorted_ids,
                num_valid_ids=num_valid_ids,
                token_num=token_num,
                topk=topk,
                block_size=block_size_M,
            )
            a2 = a2.view(token_num, topk, -1)
        else:
            a2 = a2.to(dtypes.fp8)
            a2_scale = a1_scale
    elif quant_type == QuantType.per_1x32 and w1.dtype == dtypes.i4x2:
        # a16wi4: stage1 output is bf16, no inter-stage quantization
        a2_scale = None
    elif quant_type == QuantType.per_1x32:
        a2 = a2.view(-1, inter_dim)
        a2, a2_scale = fused_dynamic_mxfp4_quant_moe_sort(
            a2,
            sorted_ids=sorted_ids,
            num_valid_ids=num_valid_ids,
            token_num=token_num,
            topk=topk,
            block_size=block_size_M,
            num_rows=num_local_tokens,
        )
        a2 = a2.view(token_num, topk, -1)
    elif quant_type == QuantType.per_1x128 and metadata.stage1.func is asm_stage1:
        a2_v = a2[:token_num, :, :]
        a2_scale = (
            a2[token_num:, ...]
            .view(-1)[: token_num * topk * inter_dim * ratio // 128]
            .view(dtypes.fp32)
            .view(token_num, -1)
        )
        a2 = a2_v
    else:
        a2, a2_scale = quant_func(
            a2,
            scale=a2_scale,
            quant_dtype=q_dtype_a,
            num_rows=num_local_tokens,
            num_rows_factor=topk,
        )
        a2 = a2.view(token_num, topk, inter_dim)

    metadata.stage2(
        a2,
        w1,
        w2,
        sorted_ids,
        sorted_expert_ids,
        num_valid_ids,
        moe_out,
        topk,
        w2_scale=(
            w2_scale.view(dtypes.fp8_e8m0) if w2.dtype == dtypes.fp4x2 else w2_scale
        ),
        a2_scale=a2_scale,
        block_m=block_size_M,
        sorted_weights=sorted_weights if not doweight_stage1 else None,
        **extra_stage2_args,
    )

    return moe_out


def torch_moe_act(act_input, torch_act, inter_dim):
    if act_input.shape[-1] == inter_dim:
        return torch_act(act_input)
    else:
        gate, up = act_input.split([inter_dim, inter_dim], dim=-1)
        return torch_act(gate) * up


def asm_stage1(
    input,
    w1,
    w2,
    sorted_ids,
    sorted_expert_ids,
    num_valid_ids,
    out,  # [token_num, topk, inter_dim]
    topk,
    block_m: int,
    kernelName: str = "",
    ksplit: int = 0,
    activation=ActivationType.Silu,
    quant_type=QuantType.No,
    a1_scale=None,
    w1_scale=None,
    sorted_weights=None,
):
    dtype = dtypes.bf16  # out.dtype, asm only support bf16
    if quant_type != QuantType.per_1x128:
        out = out.view(dtype)
    device = out.device
    token_num, _, _ = out.shape
    E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)

    if quant_type == QuantType.per_Tensor:
        a1_scale = a1_scale.view(1, 1).repeat(token_num, 1)
        w1_scale = w1_scale.view(E, 1).repeat(1, w1.shape[1])
        quant_type = QuantType.per_Token

    tmp_out = out
    if ksplit > 0:
        tmp_out = torch.zeros(
            (token_num, topk, w1.shape[1]),
            dtype=dtypes.fp32,
            device=device,
        ).view(dtype)

    aiter.moe_stage1_g1u1(
        input,
        w1,
        w2,
        sorted_ids,
        sorted_expert_ids,
        num_valid_ids,
        tmp_out,
        inter_dim,
        kernelName,
        block_m,
        ksplit=ksplit,
        activation=activation,
        quant_type=quant_type,
        a1_scale=a1_scale,
        w1_scale=w1_scale,
        sorted_weights=sorted_weights,
    )
    if ksplit > 0:
        if activation == ActivationType.Silu:
            aiter.silu_and_mul(out, tmp_out.view(dtypes.fp32))
        elif activation == ActivationType.Swiglu:
            aiter.swiglu_and_mul(out, tmp_out.view(dtypes.fp32))
        else:
            aiter.gelu_and_mul(out, tmp_out.view(dtypes.fp32))
    return out


def torch_moe(
    hidden_states,
    w1,
    w2,
    topk_weight,
    topk_ids,
    # following for int8 quant
    fc1_scale=None,  # [expert(local_expert:EP), inter_dim, 1]
    fc2_scale=None,  # [expert(local_expert:EP), model_dim, 1]
    fc1_smooth_scale=None,  # [expert(local_expert:EP), 1, model_dim]
    fc2_smooth_scale=None,  # [expert(local_expert:EP), 1, inter_dim]
    expert_mask=None,
    activation=ActivationType.Silu,
):
    computeType = dtypes.fp32
    dtype = hidden_states.dtype
    torch_act = aiter.get_torch_act(activation)
    hidden_states = hidden_states.to(computeType)
    w1 = w1.to(computeType)
    w2 = w2.to(computeType)
    B, D = hidden_states.shape
    topk = topk_weight.shape[1]
    if expert_mask is not None:
        local_expert_hash = expert_mask.cumsum(0, dtype=dtypes.i32) - 1
        local_expert_hash[expert_mask == 0] = -1
        topk_ids = local_expert_hash[topk_ids]

    hidden_states = hidden_states.view(B, -1, D).repeat(1, topk, 1)
    out = torch.zeros(
        (B, topk, D),
        dtype=computeType,
        device=hidden_states.device,
    )

    inter_dim = w2.shape[2]

    if fc1_scale is not None:
        # gose to quant D_w8a8/w8a8
        expert = w1.shape[0]
        w2D = w2.shape[-1]
        w1 = (w1.view(-1, D) * fc1_scale.view(-1, 1)).view(expert, -1, D)
        w2 = (w2.view(-1, w2D) * fc2_scale.view(-1, 1)).view(expert, -1, w2D)

    if fc1_smooth_scale is not None:
        expert = fc1_smooth_scale.shape[0]
        fc1_smooth_scale = fc1_smooth_scale.view(expert, -1)
        fc2_smooth_scale = fc2_smooth_scale.view(expert, -1)

    for E_id in range(w1.shape[0]):
        mask = topk_ids == E_id
        if mask.sum():
            sub_tokens = hidden_states[mask]
            if fc1_smooth_scale is not None:
                sub_tokens = sub_tokens * (fc1_smooth_scale[E_id])

            act_input = sub_tokens @ (w1[E_id].transpose(0, 1))
            act_out = torch_moe_act(act_input, torch_act, inter_dim)
            if fc2_smooth_scale is not None:
                act_out = act_out * (fc2_smooth_scale[E_id])
            out[mask] = act_out @ (w2[E_id].transpose(0, 1))

    return (out * topk_weight.view(B, -1, 1)).sum(dim=1).to(dtype)


# temp workaround for swiglu
def swiglu(x_glu, x_linear, alpha: float = 1.702, limit: float = 7.0):
    if limit == 0.0:
        limit = 7.0
    # Clamp the input values
    x_glu = x_glu.clamp(min=None, max=limit)
    x_linear = x_linear.clamp(min=-limit, max=limit)
    out_glu = x_glu * torch.sigmoid(alpha * x_glu)
    # Note we add an extra bias of 1 to the linear layer
    return out_glu * (x_linear + 1)


def torch_moe_stage1(
    hidden_states,
    w1,  # E, inter_dim*2, model_dim
    w2,  # E, model_dim, inter_dim
    topk_weight,
    topk_ids,
    dtype=dtypes.fp16,
    activation=ActivationType.Silu,
    quant_type=QuantType.No,
    # following for quant
    a1_scale=None,  # [token, 1]
    w1_scale=None,  # [expert, inter_dim, 1]
    w1_bias=None,  # [expert, inter_dim, 1]
    doweight=False,
    swiglu_limit=0.0,
):
    quant_type = quant_remap.get(quant_type, quant_type)
    ctype = dtypes.fp32  # compute type
    B, D = hidden_states.shape
    topk = topk_weight.shape[1]
    N = w1.shape[1]
    E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)
    if quant_type == QuantType.per_1x32 and w1.dtype == dtypes.i4x2:
        # a16wi4: int4 weights viewed as int8 for compute
        hidden_states = hidden_states.to(ctype)
        w1 = w1.view(dtypes.i8).to(ctype)
    elif quant_type == QuantType.per_1x32:
        from aiter.utility import fp4_utils

        w1 = fp4_utils.mxfp4_to_f32(w1)
        w1_scale = fp4_utils.e8m0_to_f32(w1_scale)
        if a1_scale is not None:  # skip a16w4
            hidden_states = fp4_utils.mxfp4_to_f32(hidden_states)
            a1_scale = fp4_utils.e8m0_to_f32(a1_scale)
        else:  # a16w4
            hidden_states = hidden_states.to(ctype)
    else:
        hidden_states = hidden_states.to(ctype)
        w1 = w1.to(ctype)

    if quant_type in [QuantType.per_Token, QuantType.per_Tensor]:
        w1 = w1 * w1_scale.view(w1_scale.shape[0], -1, 1)
        hidden_states = hidden_states * a1_scale
    # per_128x128
    elif quant_type in [QuantType.per_128x128, QuantType.per_1x128]:
        w1_shape = w1.shape
        w1 = w1.view(
            w1.shape[0], w1.shape[1] // 128, 128, w1.shape[2] // 128, 128
        ) * w1_scale.view(
            w1_scale.shape[0], w1.shape[1] // 128, 1, w1.shape[2] // 128, 1
        )
        w1 = w1.view(w1_shape)

        a1_scale = a1_scale.view(hidden_states.shape[0], -1, 1)
        a1_scale = a1_scale.repeat(
            1, 1, hidden_states.shape[-1] // a1_scale.shape[1]
        ).view(hidden_states.shape[0], -1)
        hidden_states = hidden_states * a1_scale
    elif quant_type == QuantType.No:
        pass
    elif (
        quant_type == QuantType.per_1x32
        and w1_scale is not None
        and w1_scale.dtype == dtypes.bf16
    ):
        # a16wi4: groupwise dequant int4 weights with scale [E, K//32, N]
        group_size = 32
        num_groups = model_dim // group_size
        w1_shape = w1.shape
        # w1: [E, N, K] -> apply scale per group of K
        w1 = w1.reshape(E, N, num_groups, group_size) * w1_scale.reshape(
            E, num_groups, N
        ).permute(0, 2, 1).unsqueeze(-1)
        w1 = w1.reshape(w1_shape)
        # activations are bf16, no scaling needed
    elif quant_type == QuantType.per_1x32:
        w1_shape = w1.shape
        w1 = w1.view(E, N, model_dim // 32, 32) * w1_scale.view(
            E, N, model_dim // 32, 1
        )
        w1 = w1.view(w1_shape)

        a1_shape = hidden_states.shape
        hidden_states = hidden_states.view(a1_shape[0], a1_shape[1] // 32, 32)
        if a1_scale is not None:
            a1_scale = a1_scale[: a1_shape[0]]
            hidden_states = hidden_states * a1_scale.view(
                a1_shape[0], a1_shape[1] // 32, 1
            )
        hidden_states = hidden_states.view(a1_shape)
    else:
        assert False, f"Unsupported quant_type: {quant_type}"

    hidden_states = hidden_states.view(B, -1, model_dim).repeat(1, topk, 1)

    out = torch.zeros(
        (B, topk, N),
        dtype=ctype,
        device=hidden_states.device,
    )
    for E_id in range(w1.shape[0]):
        mask = topk_ids == E_id
        if mask.sum():
            sub_tokens = hidden_states[mask]
            act_input = sub_tokens @ (w1[E_id].transpose(0, 1))
            if doweight:
                act_input = act_input * topk_weight[mask].view(-1, 1)
            out[mask] = act_input
            if w1_bias is not None:
                out[mask] = out[mask] + w1_bias[E_id].view(1, -1)
    use_g1u1 = w1.shape[1] == (2 * inter_dim)
    use_swiglu = activation == aiter.ActivationType.Swiglu
    torch_act = aiter.get_torch_act(activation)
    if use_g1u1:
        gate, up = out.split([inter_dim, inter_dim], dim=-1)
        if use_swiglu:
            out = swiglu(gate, up, limit=swiglu_limit)
        else:
            if swiglu_limit != 0:
                gate = gate.clamp(min=None, max=swiglu_limit)
                up = up.clamp(min=-swiglu_limit, max=swiglu_limit)
            out = torch_act(gate) * up
    else:
        out = torch_act(out)
    return out.to(dtype)


def torch_moe_stage2(
    hidden_states,
    w1,  # E, inter_dim*2, model_dim
    w2,  # E, model_dim, inter_dim
    topk_weights,
    topk_ids,
    dtype=dtypes.fp16,
    quant_type=QuantType.No,
    w2_scale=None,  # [1]
    a2_scale=None,  # [expert]]'
    w2_bias=None,
    doweight=True,
):
    ctype = dtypes.fp32  # compute type
    E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)
    if quant_type == QuantType.per_1x32 and w2.dtype == dtypes.i4x2:
        # a16wi4: int4 weights viewed as int8 for compute
        hidden_states = hidden_states.to(ctype)
        w2 = w2.view(dtypes.i8).to(ctype)
    elif quant_type == QuantType.per_1x32:
        from aiter.utility import fp4_utils

        w2 = fp4_utils.mxfp4_to_f32(w2)
        w2_scale = fp4_utils.e8m0_to_f32(w2_scale)
        if a2_scale is not None:
            hidden_states = fp4_utils.mxfp4_to_f32(hidden_states)
            a2_scale = fp4_utils.e8m0_to_f32(a2_scale)
        else:  # a16w4
            hidden_states = hidden_states.to(ctype)
    else:
        hidden_states = hidden_states.to(ctype)
        w2 = w2.to(ctype)

    token_num, topk = topk_ids.shape
    hidden_states = hidden_states.view(token_num, topk, inter_dim)

    if quant_type in [QuantType.per_Token, QuantType.per_Tensor]:
        hidden_states = hidden_states * a2_scale.view(a2_scale.shape[0], -1, 1)
        w2 = w2 * w2_scale.view(w2_scale.shape[0], -1, 1)
    elif quant_type in [QuantType.per_128x128, QuantType.per_1x128]:
        a2_scale = a2_scale.view(hidden_states.shape[0], topk, -1, 1)
        a2_scale = a2_scale.repeat(1, 1, 1, 128).view(hidden_states.shape[0], topk, -1)
        hidden_states = hidden_states * a2_scale

        w2_shape = w2.shape
        w2 = w2.view(
            w2.shape[0], w2.shape[1] // 128, 128, w2.shape[2] // 128, 128
        ) * w2_scale.view(
            w2_scale.shape[0], w2.shape[1] // 128, 1, w2.shape[2] // 128, 1
        )
        w2 = w2.view(w2_shape)
    elif (
        quant_type == QuantType.per_1x32
        and w2_scale is not None
        and w2_scale.dtype == dtypes.bf16
    ):
        # a16wi4: groupwise dequant int4 weights with scale
        # w2: [E, model_dim, inter_dim], w2_scale is [E, inter_dim//32, model_dim]
        group_size = 32
        num_groups = inter_dim // group_size
        w2_shape = w2.shape
        # w2: [E, model_dim, inter_dim] -> apply scale per group of inter_dim
        w2 = w2.reshape(E, model_dim, num_groups, group_size) * w2_scale.reshape(
            E, num_groups, model_dim
        ).permute(0, 2, 1).unsqueeze(-1)
        w2 = w2.reshape(w2_shape)
        # activations are bf16, no scaling
    elif quant_type == QuantType.per_1x32:
        a2_shape = hidden_states.shape
        if a2_scale is not None:
            a2_scale = a2_scale[: a2_shape[0] * topk]
            a2_scale = a2_scale.view(token_num, topk, inter_dim // 32, 1)
            hidden_states = (
                hidden_states.view(token_num, topk, inter_dim // 32, 32) * a2_scale
            )
        hidden_states = hidden_states.view(a2_shape)

        w2_shape = w2.shape
        w2 = w2.view(E, model_dim, inter_dim // 32, 32) * w2_scale.view(
            E, model_dim, inter_dim // 32, 1
        )
        w2 = w2.view(w2_shape)

    out = torch.zeros(
        (token_num, topk, model_dim),
        dtype=ctype,
        device=hidden_states.device,
    )
    for E_id in range(w1.shape[0]):
        mask = topk_ids == E_id
        if mask.sum():
            sub_tokens = hidden_states[mask]
            act_input = sub_tokens @ (w2[E_id].transpose(0, 1))
            out[mask] = act_input
            if w2_bias is not None:
                out[mask] = out[mask] + w2_bias[E_id].view(1, -1)
    if doweight:
        out = out * topk_weights.view(token_num, -1, 1)
    return out.sum(1).to(dtype)


def ck_moe_stage1(
    hidden_states,
    w1,  # [E, inter_dim*2, model_dim]
    w2,  # [E, model_dim, inter_dim]
    sorted_token_ids,  # [max_num_tokens_padded]
    sorted_expert_ids,  # [max_num_m_blocks]
    num_valid_ids,  # [1]
    out,
    topk,
    block_m,
    a1_scale,
    w1_scale,
    kernelName="",
    sorted_weights=None,
    quant_type=aiter.QuantType.No,
    activation=ActivationType.Gelu,
    splitk=1,
    use_non_temporal_load=False,
    dtype=None,
):
    token_num = hidden_states.shape[0]
    is_splitk = quant_type == QuantType.per_1x128 and splitk > 1
    if is_splitk:
        # CK kernel zeros this buffer via hipMemsetAsync when KBatch > 1
        sorted_size = min(token_num * topk * block_m, sorted_token_ids.shape[0])
        tmp_out = torch.empty(
            (sorted_size, w1.shape[1]), dtype=dtypes.fp32, device=out.device
        )
    else:
        tmp_out = out
    aiter.ck_moe_stage1_fwd(
        hidden_states,
        w1,
        w2,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        tmp_out,
        topk,
        kernelName,
        w1_scale,
        a1_scale,
        block_m,
        sorted_weights,
        quant_type,
        activation,
        splitk if is_splitk else 0,
        use_non_temporal_load,
        out.dtype,
    )
    if is_splitk:
        valid_out = tmp_out[: token_num * topk, :]
        if activation == ActivationType.Silu:
            aiter.silu_and_mul(out, valid_out.view(dtypes.fp32))
        else:
            aiter.gelu_and_mul(out, valid_out.view(dtypes.fp32))
    return out


def cktile_moe_stage1(
    hidden_states,
    w1,
    w2,
    sorted_token_ids,
    sorted_expert_ids,
    num_valid_ids,
    out,
    topk,
    block_m,
    a1_scale,
    w1_scale,
    sorted_weights=None,
    n_pad_zeros=0,
    k_pad_zeros=0,
    bias1=None,
    topk_ids=None,
    activation=ActivationType.Silu,
    split_k=1,
    dtype=torch.bfloat16,
    kernel_name="",
    post_activation_layout="auto",
):
    token_num = hidden_states.shape[0]
    _, n1, k1 = w1.shape
    _, k2, n2 = w2.shape
    D = n2 if k2 == k1 else n2 * 2  # bit4 format
    # max_num_tokens_padded = sorted_expert_ids.shape[0]*block_size

    if w1.dtype is torch.uint32:
        D = D * 8

    expected_out_shape = (token_num, topk, D)
    if (
        out is None
        or tuple(out.shape) != expected_out_shape
        or out.dtype != dtype
        or out.device != hidden_states.device
    ):
        out = torch.empty(expected_out_shape, dtype=dtype, device=hidden_states.device)
    needs_post_activation = split_k > 1
    # Split-k reduces into a token-topk workspace and applies activation after
    # reduction. Non-split legacy A16W4 keeps CK-Tile's fused gate/up epilogue.
    workspace_rows = token_num * topk
    if needs_post_activation:
        tmp_out = torch.zeros(
            (workspace_rows, w1.shape[1]), dtype=dtype, device=out.device
        )
    else:
        tmp_out = out
    bias1 = _normalize_bias_for_kernel(bias1)
    # print("Run cktile_moe_stage1: M=%d, N(N*2)=%d, K=%d, topk=%d, expert=%d"%(token_num, w1.shape[1], hidden_states.shape[1], topk, w1.shape[0]))
    aiter.moe_cktile2stages_gemm1(
        hidden_states,
        w1,
        tmp_out,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        topk,
        n_pad_zeros,
        k_pad_zeros,
        sorted_weights,
        a1_scale,
        w1_scale,
        None if needs_post_activation else bias1,
        activation,
        block_m,
        split_k,
        kernel_name,
    )

    if needs_post_activation:
        valid_out = tmp_out[: token_num * topk, :]
        if post_activation_layout == "auto":
            is_interleaved = (
                hasattr(torch, "float4_e2m1fn_x2")
                and w1.dtype == torch.float4_e2m1fn_x2
            )
        elif post_activation_layout == "interleaved":
            is_interleaved = True
        elif post_activation_layout == "standard":
            is_interleaved = False
        else:
            raise ValueError(
                f"Unsupported CK-Tile post activation layout: {post_activation_layout}"
            )

        if is_interleaved:
            if bias1 is not None:
                raise ValueError("CK-Tile interleaved split-k bias is not supported")
            inter_dim = out.shape[-1]
            if activation == ActivationType.Swiglu:
                from aiter.ops.flydsl.moe_kernels import (
                    _get_compiled_swiglu,
                    _run_compiled,
                )

                _swiglu_fn = _get_compiled_swiglu(inter_dim)
                num_rows = valid_out.view(-1, inter_dim * 2).shape[0]
                _run_compiled(
                    _swiglu_fn,
                    (
                        valid_out.view(-1, inter_dim * 2),
                        out.view(-1, inter_dim),
                        num_rows,
                        torch.cuda.current_stream(),
                    ),
                )
            else:
                NLane = 16
                N0 = inter_dim // NLane
                flat = valid_out.view(-1, N0, 2, NLane)
                gate = flat[:, :, 0, :].reshape(-1, inter_dim)
                up = flat[:, :, 1, :].reshape(-1, inter_dim)
                if activation == ActivationType.Gelu:
                    out.view(-1, inter_dim).copy_(torch.nn.functional.gelu(gate) * up)
                else:
                    out.view(-1, inter_dim).copy_(torch.nn.functional.silu(gate) * up)
        else:
            if bias1 is not None and topk_ids is None:
                raise ValueError(
                    "topk_ids are required for CK-Tile split-k bias handling"
                )
            expert_ids = topk_ids.view(-1) if topk_ids is not None else None
            if bias1 is not None and activation == ActivationType.Silu:
                aiter.silu_and_mul_bias(out, valid_out, expert_ids, bias1)
            elif bias1 is not None and activation == ActivationType.Swiglu:
                aiter.swiglu_and_mul_bias(out, valid_out, expert_ids, bias1)
            elif bias1 is not None:
                aiter.gelu_and_mul_bias(out, valid_out, expert_ids, bias1)
            elif activation == ActivationType.Silu:
                aiter.silu_and_mul(out, valid_out)
            elif activation == ActivationType.Swiglu:
                aiter.swiglu_and_mul(out, valid_out)
            else:
                aiter.gelu_and_mul(out, valid_out)
    return out


def cktile_moe_stage2(
    a2,
    w1,
    w2,
    sorted_token_ids,
    sorted_expert_ids,
    num_valid_ids,
    out,
    topk,
    w2_scale,
    a2_scale,
    block_m,
    activation=ActivationType.Swiglu,
    sorted_weights=None,
    zeros_out=False,
    n_pad_zeros=0,
    k_pad_zeros=0,
    bias2=None,
    kernel_name="",
):
    bias2 = _normalize_bias_for_kernel(bias2)
    # print("Run cktile_moe_stage2: M=%d, N=%d, K=%d, topk=%d, expert=%d"%(a2.shape[0]*a2.shape[1], w2.shape[1], a2.shape[2], topk, w2.shape[0]))
    aiter.moe_cktile2stages_gemm2(
        a2,
        w2,
        out,
        sorted_token_ids,
        sorted_expert_ids,
        num_valid_ids,
        topk,
        n_pad_zeros,
        k_pad_zeros,
        sorted_weights,
        a2_scale,
        w2_scale,
        bias2,
        activation,
        block_m,
        kernel_name=kernel_name,
    )
    return out


def fused_topk(
    hidden_states: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    topk_ids: Optional[torch.Tensor] = None,
    topk_weights: Optional[torch.Tensor] = None,
):
    assert hidden_states.shape[0] == gating_output.shape[0], "Number of tokens mismatch"

    M, _ = hidden_states.shape
    expert = gating_output.shape[1]

    token_expert_indicies = torch.empty(
        M, topk, dtype=dtypes.i32, device=hidden_states.device
    )

    if (
        get_gfx() in ["gfx942", "gfx950"]
        and (expert, topk)
        in [
            (128, 4),
            (128, 6),
            (128, 8),
            (256, 6),
            (256, 8),
            (384, 8),
        ]
        and gating_output.dtype in [dtypes.bf16, dtypes.fp32]
        and gating_output.is_contiguous()
    ):
        if topk_weights is None:
            topk_weights = torch.empty(
                (M + 3) // 4 * 4, topk, dtype=dtypes.fp32, device=hidden_states.device
            )
        if topk_ids is None:
            topk_ids = torch.empty(
                (M + 3) // 4 * 4, topk, dtype=dtypes.i32, device=hidden_states.device
            )
        aiter.topk_softmax_asm(
            topk_weights,
            topk_ids,
            token_expert_indicies,
            gating_output,
            renormalize,
        )
        topk_weights = topk_weights[:M, :]
        topk_ids = topk_ids[:M, :]
    else:
        if topk_weights is None:
            topk_weights = torch.empty(
                M, topk, dtype=dtypes.fp32, device=hidden_states.device
            )
        if topk_ids is None:
            topk_ids = torch.empty(
                M, topk, dtype=dtypes.i32, device=hidden_states.device
            )
        aiter.topk_softmax(
            topk_weights,
            topk_ids,
            token_expert_indicies,
            gating_output,
            renormalize,
        )

    del token_expert_indicies  # Not used. Will be used in the future.

    # if renormalize:
    #     topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)

    return topk_weights, topk_ids
