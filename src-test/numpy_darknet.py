"""Independent NumPy ports of Darknet's forward semantics (AlexeyAB darknet, see
/work/notes_darknet_semantics.md), written from Darknet's C loops rather than from our engine.
Float64 throughout; inputs are NCHW arrays."""
from __future__ import annotations

import numpy as np


# ---------------------------------------------------------------------------------------------
# activations (activations.h / activations.c)
# ---------------------------------------------------------------------------------------------

def _softplus(x, t=20.0):
    return np.where(x > t, x, np.where(x < -t, np.exp(np.minimum(x, t)), np.log1p(np.exp(np.minimum(x, t)))))


def activate(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if name == "linear":
        return x
    if name == "leaky":
        return np.where(x > 0, x, 0.1 * x)
    if name == "relu":
        return x * (x > 0)
    if name == "relu6":
        return np.clip(x, 0, 6)
    if name == "logistic":
        return 1 / (1 + np.exp(-x))
    if name == "tanh":
        return 2 / (1 + np.exp(-2 * x)) - 1
    if name == "swish":
        return x / (1 + np.exp(-x))
    if name == "mish":
        return x * np.tanh(_softplus(x))
    if name == "hard_mish":
        return np.where(x > 0, x, np.where(x > -2, x * x / 2 + x, 0.0))
    if name == "elu":
        return (x >= 0) * x + (x < 0) * (np.exp(x) - 1)
    if name == "selu":
        return (x >= 0) * 1.0507 * x + (x < 0) * 1.0507 * 1.6732 * (np.exp(x) - 1)
    if name == "gelu":
        return 0.5 * x * (1 + np.tanh(0.797885 * x + 0.035677 * x ** 3))
    if name == "normalize_channels":  # per pixel over channels: positive parts / (eps + their sum)
        pos = np.where(x > 0, x, 0.0)
        return pos / (0.0001 + pos.sum(axis=1, keepdims=True))
    if name == "normalize_channels_softmax":  # max_val = 0 in Darknet's non-"maxval" variant
        e = np.exp(x)
        return e / (0.0001 + e.sum(axis=1, keepdims=True))
    raise ValueError(name)


# ---------------------------------------------------------------------------------------------
# convolution (im2col_cpu_ext with pad*dilation; output size ignores dilation)
# ---------------------------------------------------------------------------------------------

def conv2d(x, w, *, stride_y=1, stride_x=1, padding=0, dilation=1, groups=1, out_h=None, out_w=None):
    """Darknet's convolution: out size (h + 2*padding - size)/stride + 1, im2col padding
    padding*dilation, taps outside the input read 0."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    f, cg, k, _ = w.shape
    if out_h is None:
        out_h = (h + 2 * padding - k) // stride_y + 1
        out_w = (wd + 2 * padding - k) // stride_x + 1
    p = padding * dilation
    # pad generously so every tap index is valid; zeros stand for "outside the image"
    need_h = (out_h - 1) * stride_y + (k - 1) * dilation + 1
    need_w = (out_w - 1) * stride_x + (k - 1) * dilation + 1
    xp = np.zeros((n, c, max(need_h, h + p), max(need_w, wd + p)))
    xp[:, :, p:p + h, p:p + wd] = x
    fg = f // groups
    y = np.zeros((n, f, out_h, out_w))
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        wsl = w[g * fg:(g + 1) * fg]
        for ky in range(k):
            for kx in range(k):
                oy, ox = ky * dilation, kx * dilation
                patch = xs[:, :, oy:oy + (out_h - 1) * stride_y + 1:stride_y,
                           ox:ox + (out_w - 1) * stride_x + 1:stride_x]
                y[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", patch, wsl[:, :, ky, kx])
    return y


def batchnorm(y, mean, var, scales, biases, eps=1e-5):
    """normalize_cpu + scale_bias + add_bias; eps 1e-5 inside the sqrt."""
    r = lambda a: np.asarray(a, np.float64).reshape(1, -1, 1, 1)  # noqa: E731
    return (y - r(mean)) / np.sqrt(r(var) + eps) * r(scales) + r(biases)


# ---------------------------------------------------------------------------------------------
# pooling (maxpool_layer.c)
# ---------------------------------------------------------------------------------------------

def _windows(x, size, stride_y, stride_x, padding, fill):
    n, c, h, w = x.shape
    out_h = (h + padding - size) // stride_y + 1
    out_w = (w + padding - size) // stride_x + 1
    off = padding // 2  # windows start at -pad/2 (integer division); the rest of the pad is bottom/right
    need_h = (out_h - 1) * stride_y + size
    need_w = (out_w - 1) * stride_x + size
    xp = np.full((n, c, max(need_h, h + off), max(need_w, w + off)), fill)
    xp[:, :, off:off + h, off:off + w] = x
    taps = [xp[:, :, i:i + (out_h - 1) * stride_y + 1:stride_y, j:j + (out_w - 1) * stride_x + 1:stride_x]
            for i in range(size) for j in range(size)]
    return np.stack(taps)


def maxpool(x, size, stride_y, stride_x, padding):
    return _windows(np.asarray(x, np.float64), size, stride_y, stride_x, padding, -np.inf).max(axis=0)


def local_avgpool(x, size, stride_y, stride_x, padding):
    """Average over the in-bounds taps only (Darknet divides by its `counter`)."""
    x = np.asarray(x, np.float64)
    s = _windows(x, size, stride_y, stride_x, padding, 0.0).sum(axis=0)
    cnt = _windows(np.ones_like(x), size, stride_y, stride_x, padding, 0.0).sum(axis=0)
    return s / cnt


def maxpool_depth(x, out_c):
    """out[g] = max over input channels g, g + out_c, g + 2*out_c, ..."""
    x = np.asarray(x, np.float64)
    return np.stack([x[:, g::out_c].max(axis=1) for g in range(out_c)], axis=1)


# ---------------------------------------------------------------------------------------------
# reorg (blas.c reorg_cpu with forward=0)
# ---------------------------------------------------------------------------------------------

def reorg_cpu(x_flat, out_w, out_h, out_c, batch, stride):
    """Literal port of reorg_cpu(x, out_w, out_h, out_c, batch, stride, forward=0, out)."""
    out = np.empty_like(x_flat)
    in_c = out_c // (stride * stride)
    for b in range(batch):
        for k in range(out_c):
            c2, offset = k % in_c, k // in_c
            for j in range(out_h):
                for i in range(out_w):
                    w2 = i * stride + offset % stride
                    h2 = j * stride + offset // stride
                    in_index = i + out_w * (j + out_h * (k + out_c * b))
                    out_index = w2 + out_w * stride * (h2 + out_h * stride * (c2 + in_c * b))
                    out[in_index] = x_flat[out_index]
    return out


def reorg3d(x, stride):
    """[reorg3d] reverse=0: space-to-depth, out[k] = in[k % c][y*s + (k//c)//s][x*s + (k//c)%s]."""
    n, c, h, w = x.shape
    flat = reorg_cpu(np.asarray(x, np.float64).ravel(), w // stride, h // stride, c * stride * stride, n, stride)
    return flat.reshape(n, c * stride * stride, h // stride, w // stride)


def reorg_old(x, stride):
    """[reorg] (YOLOv2): reorg_cpu called with the INPUT dims; result labelled (c*s*s, h/s, w/s)."""
    n, c, h, w = x.shape
    flat = reorg_cpu(np.asarray(x, np.float64).ravel(), w, h, c, n, stride)
    return flat.reshape(n, c * stride * stride, h // stride, w // stride)


# ---------------------------------------------------------------------------------------------
# shortcut (shortcut_multilayer_cpu), upsample, softmax, connected
# ---------------------------------------------------------------------------------------------

def shortcut(x, froms, weights=None, weights_type="none", normalization="none"):
    """Literal per-element port of shortcut_multilayer_cpu for one batch of NCHW arrays."""
    x = np.asarray(x, np.float64)
    n_b, c, h, w = x.shape
    src_outputs = c * h * w
    nfrom = len(froms)
    froms = [np.asarray(f, np.float64).reshape(n_b, -1) for f in froms]
    xf = x.reshape(n_b, -1)
    out = np.empty_like(xf)
    nweights = 0 if weights is None else len(weights)
    layer_step = nweights // (nfrom + 1) if nweights else 0
    step = src_outputs // layer_step if nweights else 0

    def norm_weights(src_i):
        ws = np.array([weights[src_i // step + i * layer_step] for i in range(nfrom + 1)], np.float64)
        if normalization == "relu":
            r = np.maximum(ws, 0)
            return r / (0.0001 + r.sum())
        if normalization == "softmax":
            e = np.exp(ws - ws.max())
            return e / (0.0001 + e.sum())
        return ws

    for src_i in range(src_outputs):
        ws = norm_weights(src_i) if nweights else np.ones(nfrom + 1)
        for b in range(n_b):
            acc = xf[b, src_i] * ws[0]
            for i, f in enumerate(froms):
                if src_i < f.shape[1]:
                    acc += f[b, src_i] * ws[i + 1]
            out[b, src_i] = acc
    return out.reshape(x.shape)


def upsample(x, stride, scale=1.0):
    """stride > 0: nearest neighbour times scale; stride < 0: sum over stride x stride blocks times scale."""
    x = np.asarray(x, np.float64)
    if stride > 0:
        return scale * x.repeat(stride, axis=2).repeat(stride, axis=3)
    s = -stride
    n, c, h, w = x.shape
    return scale * x[:, :, :h // s * s, :w // s * s].reshape(n, c, h // s, s, w // s, s).sum(axis=(3, 5))


def softmax(x, groups=1, temperature=1.0):
    """Darknet softmax over each group of the FLATTENED c*h*w input of a sample."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    g = x.reshape(n, groups, -1)
    e = np.exp(g / temperature - g.max(axis=2, keepdims=True) / temperature)
    return (e / e.sum(axis=2, keepdims=True)).reshape(x.shape)


def connected(x, weights, biases, bn=None, activation="linear"):
    """out[b][o] = sum_k in[b][k] * W[o][k] (+ batchnorm) + bias, then activation."""
    x = np.asarray(x, np.float64).reshape(x.shape[0], -1)
    y = x @ np.asarray(weights, np.float64).reshape(len(biases), -1).T
    if bn is not None:
        scales, mean, var = (np.asarray(a, np.float64).ravel() for a in bn)
        y = (y - mean) / np.sqrt(var + 1e-5) * scales
    y = y + np.asarray(biases, np.float64).ravel()
    return activate(y, activation)
