"""The op parity cases in half storage (src-lib/gpu/PRECISION.md), shared by src-test/test_half_precision.py
and `darknet_py selftest --precision`: the fp32 cases of op_cases.py whose ops take fp16 / bf16
activations, with those inputs rounded to the format and tolerances widened by what the format's
rounding adds (half_cases: the forward ops, half_train_cases: the training ops,
half_conv_backward_cases: the convolutions' backward passes).
"""
from __future__ import annotations

from typing import List

import numpy as np

from .op_cases import CASES, DOT_TOL, TRAIN_CASES, Case, activation_is_elementwise, flat_outputs

# ---------------------------------------------------------------------------------------------
# Half storage (src-lib/gpu/PRECISION.md): the ops of src-lib/kernels/storage_kernels.h with their
# activations stored in fp16 or bf16 (Ops.storage), math in fp32, parameters fp32.
#
# Tolerances follow from the formats. Round to nearest even moves a value by at most half an ulp:
# a relative 2^-11 for fp16 (11 significant bits) and 2^-8 for bf16 (8 bits); below fp16's smallest
# normal the step is absolute, at most 2^-25. The inputs are rounded to the format before both runs
# (the reference gets exactly what the device stores), so what remains is, per op:
#   every op            the output's own rounding: u * |y|
#   conv2d              + the weights' half copy (cuDNN): u * sum |x w|
#   conv2d_affine_act   + (that + the convolution's half output) * |scale|, times an activation
#                       slope <= 2: 4 u |scale| sum |x w|
#   shortcut            + a rounding after each of the n inputs' partial sums: u n sum |w_k in_k|
#   yolo_activate       nothing: its output is fp32
# on top of the fp32 case's own tolerance. Outputs beyond the format's range (a max pool window of
# padding only gives -FLT_MAX, which is -inf in half) are left out.
HALF_UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
HALF_FLOOR = {"fp16": 2.0 ** -25, "bf16": 0.0}
HALF_MAX = {"fp16": 65504.0, "bf16": 3.38e38}
# op -> the positions of its activation arguments (lists hold several)
HALF_ACTIVATION_ARGS = {"conv2d": (0,), "conv2d_affine_act": (0,), "activate": (0,), "pool": (1,),
                        "copy_channels": (0, 2), "shortcut": (0, 1), "upsample": (0,), "yolo_activate": (0,)}


def round_to(x: np.ndarray, precision: str) -> np.ndarray:
    """float32 values rounded to fp16 / bf16 (nearest even) and widened back to float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if precision == "fp16":
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def _half_extra(ref, op: str, args: tuple, u: float):
    """The op-specific term of the half tolerance above (an array or 0), from the reference."""
    if op == "conv2d":
        return u * ref.conv2d(np.abs(args[0]), np.abs(args[1]), *args[2:9])
    if op == "conv2d_affine_act":
        x, w, geom, scale = args[0], args[1], args[2:9], args[9]
        sc = np.ones(w.shape[0]) if scale is None else np.abs(scale).astype(np.float64)
        return 4 * u * ref.conv2d(np.abs(x), np.abs(w), *geom) * sc[None, :, None, None]
    if op == "shortcut":
        x, froms, weights, wt, norm = args
        w = np.abs(weights) if norm == 0 else weights  # normalised weights are >= 0 already
        return u * (len(froms) + 1) * ref.shortcut(np.abs(x), [np.abs(f) for f in froms], w, wt, norm)
    return 0.0


def half_cases(precision: str, ref) -> List[Case]:
    """The forward CASES of the ops that take half storage, with their activation inputs rounded to
    `precision`, for an Ops whose storage is `precision`; `ref` (the reference Ops) drops the cases
    whose results leave the format's range."""
    u, floor = HALF_UNIT[precision], HALF_FLOOR[precision]
    out = []
    for base in CASES:
        if base.op not in HALF_ACTIVATION_ARGS:
            continue
        if base.op in ("activate", "conv2d_affine_act") and not activation_is_elementwise(base.args[-1]):
            continue
        if base.op == "pool" and base.args[0] not in ("max", "local_avg"):
            continue
        args = list(base.args)
        for k in HALF_ACTIVATION_ARGS[base.op]:
            args[k] = [round_to(a, precision) for a in args[k]] if isinstance(args[k], list) else round_to(args[k], precision)
        args = tuple(args)
        if np.abs(getattr(ref, base.op)(*args)).max() > HALF_MAX[precision]:
            continue

        def tol(r, base=base, args=args):
            own = base.atol * (base.scale(r) if base.scale else 1.0)
            u_out = 0.0 if base.op == "yolo_activate" else u * np.abs(getattr(r, base.op)(*args)) + floor
            return own + u_out + _half_extra(r, base.op, args, u)

        out.append(Case(f"{precision}-{base.id}", base.op, args, atol=1.0, rtol=base.rtol, scale=tol))
    return out


# ---------------------------------------------------------------------------------------------
# Half-storage training (PRECISION.md, phase 2): the training ops of src-lib/kernels/storage_training.h
# with their activations and activation gradients in fp16 or bf16, parameters, parameter gradients
# and batch statistics in fp32. The TRAIN_CASES of those ops with their activation inputs rounded to
# the format (the reference gets exactly what the device stores). Every op computes in fp32 from
# those inputs and rounds each output it stores in half once (an accumulating gradient, dx +=, is
# loaded, added in fp32 and stored: still one rounding of the result), so on top of the fp32 case's
# own tolerance an output in half gets u * |result| (+ fp16's absolute floor) and an fp32 output
# (db, dscale, dbias, mean, var, dweights) gets nothing: its inputs are exact.
# op -> (positions of its activation arguments, indices of its outputs stored in half; "all but
# the last" for shortcut_backward's dx and dfrom, its dweights being fp32)
HALF_TRAIN_OPS = {"bias_backward": ((0,), ()), "batchnorm_train": ((0,), (0, 1)),
                  "batchnorm_backward": ((0, 1), (0,)), "activate_backward": ((0, 1), (0,)),
                  "batchnorm_activate_train": ((0,), (0, 1)), "batchnorm_activate_backward": ((0, 1, 2), (0,)),
                  "pool_backward": ((1, 2), (0,)), "add_channels": ((0, 2), (0,)),
                  "shortcut_backward": ((0, 1, 5), "all but the last"), "upsample_backward": ((0,), (0,)),
                  "fill": ((), (0,)), "add_scaled": ((2,), (0,))}


def _fused_gradient_rounding(base: Case, u: float) -> List[np.ndarray]:
    """batchnorm_activate_backward in half stores g = dy * act'(y) in the storage type before its sums
    and its data gradient read it (as activate_backward then batchnorm_backward do): each g off by up
    to u |g| <= u |dy|, which moves dx by up to u times the magnitude its own bound scales (dx_mag,
    DOT_TOL * dx_mag being that bound) and dscale, dbias by u sum |dy x_norm|, u sum |dy|."""
    dx_bound, dscale_bound, dbias_bound = base.scale(None)
    n = base.args[0].size // base.args[0].shape[1]  # values per channel: the bounds' sqrt(N)
    return [u / DOT_TOL * dx_bound, u / DOT_TOL * dscale_bound / np.sqrt(n), u / DOT_TOL * dbias_bound / np.sqrt(n)]


def half_train_cases(precision: str, ref) -> List[Case]:
    """The TRAIN_CASES (and add_scaled, fill) of the ops that train in half storage, for an Ops whose
    storage is `precision`, with the tolerances above; `ref` (the reference Ops) drops the cases whose
    results leave the format's range."""
    u, floor = HALF_UNIT[precision], HALF_FLOOR[precision]
    bases = [c for c in TRAIN_CASES if c.op in HALF_TRAIN_OPS and
             not (c.op == "pool_backward" and c.args[0] not in ("max", "local_avg"))]
    bases += [c for c in CASES if c.op == "fill"]
    out = []
    for base in bases:
        act_args, half_outputs = HALF_TRAIN_OPS[base.op]
        if base.op == "add_scaled" and base.args[3]:  # x in the storage type too
            act_args = (0, 2)
        args = list(base.args)
        for k in act_args:
            args[k] = [round_to(a, precision) for a in args[k]] if isinstance(args[k], list) else round_to(args[k], precision)
        args = tuple(args)
        want = flat_outputs(getattr(ref, base.op)(*args))
        if max(np.abs(w).max() for w in want if w.size) > HALF_MAX[precision]:
            continue
        in_half = range(len(want) - 1) if half_outputs == "all but the last" else half_outputs

        def tol(r, base=base, args=args, in_half=in_half):
            want = flat_outputs(getattr(r, base.op)(*args))
            own = [base.atol * np.asarray(o) for o in base.scale(r)] if base.scale else [base.atol] * len(want)
            extra = _fused_gradient_rounding(base, u) if base.op == "batchnorm_activate_backward" else [0] * len(want)
            return [o + e + base.rtol * np.abs(w) + (u * np.abs(w) + floor if k in in_half else 0)
                    for k, (o, w, e) in enumerate(zip(own, want, extra))]

        out.append(Case(f"{precision}-{base.id}", base.op, args, atol=1.0, rtol=0.0, scale=tol))
    return out


# Half training (src-lib/gpu/PRECISION.md, phase 2): the convolutions' backward passes with the
# activations and their gradients in fp16 / bf16 (x, dy, dx), weights and the weight gradient fp32.
# The inputs are rounded to the format first, as above; with u the unit roundoff (2^-11, 2^-8) and
# the fp32 case's own tolerance (DOT_TOL * sqrt(K) times the magnitude, K = the reduction length:
# N * out_h * out_w terms per weight gradient, cout/groups * kh * kw per input gradient), what
# remains is, per op:
#   conv2d_backward_weights  our kernels: nothing (the GEMM's fp32 sums go straight into the fp32
#                            dw); cuDNN (dw_in_half): its half result, one rounding: u sum |x dy|
#   conv2d_backward_data     the weights' half copy (param_in): u sum |w dy|; the store into the
#                            half dx: u |dx|; cuDNN may round W^T dy to half before adding it to dx:
#                            another u sum |w dy|
# plus fp16's absolute step below its smallest normal (2^-25) for each rounding. Cases whose results
# leave the format's range are left out.
HALF_CONV_BACKWARD_OPS = ("conv2d_backward_weights", "conv2d_backward_data")


def forms_dw_in_half(device, precision: str) -> bool:
    """Whether `device` (a name; tests pass fake Device objects too) may form a weight gradient in half
    before adding it into the fp32 one: cuDNN (in fp16 without the loss scale: src-lib/gpu/PRECISION.md);
    every other path sums it in fp32."""
    return isinstance(device, str) and device.startswith("cuda") and precision in ("fp16", "bf16")


def half_conv_backward_cases(precision: str, ref, dw_in_half: bool) -> List[Case]:
    """The conv backward cases of TRAIN_CASES (every geometry of the forward parity) for an Ops whose
    storage is `precision`, tolerances as above; dw_in_half: the device may form the weight
    gradient in half first (cuDNN on CUDA) rather than only in fp32 (our kernels)."""
    u, floor = HALF_UNIT[precision], HALF_FLOOR[precision]
    out = []
    for base in TRAIN_CASES:
        if base.op == "conv2d_backward_weights":
            x, dy, dw0, *geom = base.args
            args = (round_to(x, precision), round_to(dy, precision), dw0, *geom)
            fresh = ref.conv2d_backward_weights(args[0], args[1], np.zeros_like(dw0), *geom)  # the half part

            def tol(r, base=base, args=args, geom=geom):
                extra = 0.0
                if dw_in_half:
                    x, dy, dw0 = args[:3]
                    extra = u * r.conv2d_backward_weights(np.abs(x), np.abs(dy), np.zeros_like(dw0), *geom) + floor
                return [base.scale(r)[0] + extra]
        elif base.op == "conv2d_backward_data":
            dy, w, dx0, *geom = base.args
            args = (round_to(dy, precision), w, round_to(dx0, precision), *geom)
            fresh = ref.conv2d_backward_data(*args)

            def tol(r, base=base, args=args, geom=geom):
                dy, w, dx0 = args[:3]
                products = r.conv2d_backward_data(np.abs(dy), np.abs(w), np.zeros_like(dx0), *geom)
                return [base.scale(r)[0] + 2 * u * products + u * np.abs(r.conv2d_backward_data(*args)) + 3 * floor]
        else:
            continue
        if np.abs(fresh).max() > HALF_MAX[precision]:
            continue
        out.append(Case(f"{precision}-{base.id}", base.op, args, atol=1.0, rtol=0, scale=tol))
    return out
