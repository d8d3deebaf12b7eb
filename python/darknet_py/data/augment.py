"""Darknet's training augmentation for detection, on NumPy/OpenCV images.

Written from the semantics of AlexeyAB Darknet's data.c (load_data_detection, fill_truth_detection,
correct_boxes, blend_truth_mosaic), image_opencv.cpp (image_data_augmentation) and detector.c
(the `random=1` resizing), reading those sources: the crop rectangle, its integer truncations, the
mean-colour fill outside the image, the resize, flip and HSV steps and the box arithmetic follow
them. Random numbers come from a NumPy Generator (Darknet uses rand()), so the streams differ but
the distributions are Darknet's.

One sample: a float32 CHW RGB image in [0, 1] at the network size and a (n, 5) float32 array of
truth boxes `class, cx, cy, w, h`, normalised to the network input (labels.darknet_truth turns it
into Darknet's x, y, w, h, class order).

Options (augment_options_from_cfg reads them from a cfg): jitter, resize, flip, letter_box, hue,
saturation, exposure, blur, gaussian_noise, mosaic, mosaic_bound, mixup, cutmix, max_boxes, random,
resize_step, width, height, channels. Which groups of images get mosaic or mixup is the loader's
choice (loader.py); cutmix is not applied to detection, as in Darknet.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from .. import _core  # imported here once: an import statement in a function costs a few us a call
from .batch_storage import into_half
from .darknet_files import DataFileError

DEFAULT_OPTIONS: Dict[str, float] = {
    "width": 416, "height": 416, "channels": 3,
    # [yolo] (the last head, as Darknet's train_detector takes it); no head: no jitter
    "jitter": 0.0, "resize": 1.0, "random": 0.0, "max_boxes": 200, "classes": 0,
    # [net]
    "flip": 1, "letter_box": 0, "hue": 0.0, "saturation": 1.0, "exposure": 1.0,
    "mosaic": 0, "mosaic_bound": 0, "resize_step": 32,
    "mixup": 0, "cutmix": 0, "blur": 0, "gaussian_noise": 0,
}

# cfg key -> (option name, type) for the [net] section
_NET_KEYS = {
    "width": ("width", int), "height": ("height", int), "channels": ("channels", int),
    "flip": ("flip", int), "letter_box": ("letter_box", int), "hue": ("hue", float),
    "saturation": ("saturation", float), "exposure": ("exposure", float), "mosaic": ("mosaic", int),
    "mosaic_bound": ("mosaic_bound", int), "resize_step": ("resize_step", float), "mixup": ("mixup", int),
    "cutmix": ("cutmix", int), "blur": ("blur", int), "gaussian_noise": ("gaussian_noise", int),
}
_HEAD_KEYS = {"jitter": ("jitter", float), "resize": ("resize", float), "random": ("random", float),
              "max": ("max_boxes", int), "classes": ("classes", int)}
_HEADS = ("yolo", "gaussian_yolo", "region")


# ---- options from a cfg ---------------------------------------------------------------------
def _read_cfg_sections(path: str) -> List[Tuple[str, int, Dict[str, Tuple[str, int]]]]:
    """[(section name lower-case, line, {key: (value, line)})] of a Darknet cfg."""
    sections: List[Tuple[str, int, Dict[str, Tuple[str, int]]]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f.read().splitlines(), 1):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                sections.append((line.strip("[]").strip().lower(), number, {}))
            elif sections and "=" in line:
                key, _, value = line.partition("=")
                sections[-1][2][key.strip()] = (value.strip(), number)
    return sections


def _convert(path: str, key: str, value: str, line: int, kind: type):
    try:
        return kind(float(value)) if kind is int else kind(value)
    except ValueError:
        raise DataFileError(f"{path}:{line}: {key} must be a number, got {value!r}") from None


def augment_options_from_cfg(cfg_path: str) -> Dict[str, float]:
    """The augmentation options of a cfg as a dict (keys of DEFAULT_OPTIONS): [net] width, height,
    channels, flip, letter_box, hue, saturation, exposure, mosaic, mosaic_bound, resize_step; and
    from the last [yolo] (or [Gaussian_yolo]/[region]) section, as Darknet's train_detector takes
    them: jitter (default .2), resize, random, max (-> max_boxes) and classes."""
    cfg_path = os.fspath(cfg_path)
    sections = _read_cfg_sections(cfg_path)
    if not sections or sections[0][0] not in ("net", "network"):
        raise DataFileError(f"{cfg_path}: the first section must be [net]")
    opts = dict(DEFAULT_OPTIONS)
    for key, (value, line) in sections[0][2].items():
        if key in _NET_KEYS:
            name, kind = _NET_KEYS[key]
            opts[name] = _convert(cfg_path, key, value, line, kind)
    heads = [s for s in sections if s[0] in _HEADS]
    if heads:
        name, _, keys = heads[-1]
        opts["jitter"] = 0.2  # parse_yolo's default
        opts["max_boxes"] = 30 if name == "region" else 200
        for key, (value, line) in keys.items():
            if key in _HEAD_KEYS:
                oname, kind = _HEAD_KEYS[key]
                opts[oname] = _convert(cfg_path, key, value, line, kind)
    if opts["mosaic"] and opts["letter_box"]:
        raise DataFileError(f"{cfg_path}: mosaic=1 with letter_box=1 is not supported (Darknet refuses it too)")
    return opts


def no_augmentation(opts: Dict[str, float]) -> Dict[str, float]:
    """`opts` with every random augmentation off (validation-style loading at the network size)."""
    out = dict(opts)
    out.update(jitter=0.0, resize=1.0, flip=0, hue=0.0, saturation=1.0, exposure=1.0, mosaic=0, mixup=0, cutmix=0,
               blur=0, gaussian_noise=0)
    return out


# ---- random helpers (Darknet's utils.c, on a NumPy Generator) -------------------------------
def rand_scale(rng, s: float) -> float:
    """Darknet's rand_scale: a factor in [1, s], or its inverse, with even odds."""
    return _scale_from(rng.random(), rng.random(), s)


def _scale_from(u1: float, u2: float, s: float) -> float:
    """rand_scale from its two uniform draws."""
    scale = 1.0 + u1 * (s - 1.0)  # rand_uniform_strong(1, s); works for s < 1 too
    return scale if u2 < 0.5 else 1.0 / scale


def _precalc(lo: float, hi: float, r: float) -> float:
    """Darknet's rand_precalc_random: lo + r * (hi - lo), bounds in either order."""
    if hi < lo:
        lo, hi = hi, lo
    return r * (hi - lo) + lo


def _cdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def random_network_size(base_w: int, base_h: int, rng, random_coef: float = 1.4, resize_step: int = 32,
                        largest: bool = False) -> Tuple[int, int]:
    """The network size for the next 10 iterations with `random=1`, as Darknet's train_detector
    picks it: a factor in [1/coef, coef] (coef = 1.4, or the cfg's `random` when it is not 1),
    sizes rounded to multiples of `resize_step` after adding one step (Darknet's `+ 1`), never above
    the base size when the factor is below 1. Darknet uses the largest size (`largest=True`) for the
    first resize and the last 100 iterations, to check memory and settle the batchnorm statistics."""
    step = int(resize_step)
    if largest:
        w = math.floor(random_coef * base_w / step + 1 + 0.5) * step  # roundl: halves away from zero
        h = math.floor(random_coef * base_h / step + 1 + 0.5) * step
    else:
        val = rand_scale(rng, random_coef)
        w = math.floor(val * base_w / step + 1 + 0.5) * step
        h = math.floor(val * base_h / step + 1 + 0.5) * step
        if val < 1 and (w > base_w or h > base_h):
            w, h = base_w, base_h
    return max(w, step), max(h, step)


# ---- one image ------------------------------------------------------------------------------
@dataclass
class CropParams:
    """The random choices for one image: the crop rectangle in source pixels (it may reach outside
    the image), flip, and the HSV factors."""

    pleft: int
    pright: int
    ptop: int
    pbot: int
    swidth: int
    sheight: int
    flip: bool
    dhue: float
    dsat: float
    dexp: float


def sample_crop(rng, ow: int, oh: int, net_w: int, net_h: int, opts: Dict[str, float],
                mosaic_index: Optional[int] = None) -> CropParams:
    """Darknet's per-image choices in load_data_detection for an ow x oh source image.
    `mosaic_index` (0..3) is the quadrant when the image is one of a mosaic's four."""
    jitter, resize = float(opts["jitter"]), float(opts["resize"])
    hue, sat, exp = float(opts["hue"]), float(opts["saturation"]), float(opts["exposure"])
    dw, dh = int(ow * jitter), int(oh * jitter)
    down = 1 / resize if resize > 1 else resize
    up = 1 / resize if resize < 1 else resize
    min_rdw, min_rdh = int(ow * (1 - 1 / down) / 2), int(oh * (1 - 1 / down) / 2)  # <= 0
    max_rdw, max_rdh = int(ow * (1 - 1 / up) / 2), int(oh * (1 - 1 / up) / 2)  # >= 0

    # the uniform doubles of these choices in one call, in the order they were drawn one by one (a
    # Generator's random(n) gives the doubles n calls of random() give): each call costs a few us of
    # Python and NumPy glue, more inside a sample, whose pixel passes evict the interpreter's caches
    flip_on = bool(opts["flip"])
    u = iter(rng.random(6 + flip_on + bool(hue) + 2 * (sat != 1) + 2 * (exp != 1)).tolist())
    resize_r1, resize_r2, r1, r2, r3, r4 = next(u), next(u), next(u), next(u), next(u), next(u)
    flip = flip_on and next(u) < 0.5
    dhue = -hue + (hue - -hue) * next(u) if hue else 0.0  # rng.uniform(-hue, hue): low + (high - low) * u
    dsat = _scale_from(next(u), next(u), sat) if sat != 1 else 1.0
    dexp = _scale_from(next(u), next(u), exp) if exp != 1 else 1.0

    # C assigns float expressions to ints: every step truncates toward zero, as int() does
    pleft, pright = int(_precalc(-dw, dw, r1)), int(_precalc(-dw, dw, r2))
    ptop, pbot = int(_precalc(-dh, dh, r3)), int(_precalc(-dh, dh, r4))
    hi_w, hi_h = (0, 0) if resize < 1 else (max_rdw, max_rdh)  # resize < 1: shrink only
    pleft = int(pleft + _precalc(min_rdw, hi_w, resize_r1))
    pright = int(pright + _precalc(min_rdw, hi_w, resize_r2))
    ptop = int(ptop + _precalc(min_rdh, hi_h, resize_r1))
    pbot = int(pbot + _precalc(min_rdh, hi_h, resize_r2))

    if opts["letter_box"]:  # widen the crop to the network's aspect ratio (filled with the mean colour)
        net_ar = net_w / net_h
        if (ow / oh) / net_ar > 1:
            delta_h = (ow / net_ar - oh) / 2
            ptop, pbot = int(ptop - delta_h), int(pbot - delta_h)
        else:
            delta_w = (oh * net_ar - ow) / 2
            pleft, pright = int(pleft - delta_w), int(pright - delta_w)

    if mosaic_index is not None and rng.random() < 0.5:
        # Darknet moves every second image of a mosaic towards its corner, so most of it is visible
        corner = mosaic_index ^ 1 if flip else mosaic_index  # flipped: the mirrored corner
        if corner in (0, 2):
            pright, pleft = pright + pleft, 0
        else:
            pleft, pright = pleft + pright, 0
        if corner in (0, 1):
            pbot, ptop = pbot + ptop, 0
        else:
            ptop, pbot = ptop + pbot, 0

    swidth, sheight = ow - pleft - pright, oh - ptop - pbot
    if swidth <= 0 or sheight <= 0 or ow - pleft <= 0 or oh - ptop <= 0:
        swidth, sheight, pleft, ptop = ow, oh, 0, 0  # Darknet's "invalid resize" reset (pright/pbot kept)
    return CropParams(pleft, pright, ptop, pbot, swidth, sheight, flip, dhue, dsat, dexp)


def correct_truth(boxes: np.ndarray, p: CropParams, ow: int, oh: int, net_w: int, net_h: int,
                  max_boxes: int, rng) -> np.ndarray:
    """Darknet's fill_truth_detection + correct_boxes: the boxes (class-first, normalised to the
    source image) in shuffled order, moved into the crop, mirrored when flipped, clipped to [0, 1],
    cut to `max_boxes`, then those narrower or lower than one network pixel dropped, with those wholly
    outside the source image or at x = y = 0. The arithmetic after the shuffle is C++ (_core.correct_boxes,
    src-lib/loader_boxes.cpp: the float32 steps NumPy took, in one pass instead of some 45 calls)."""
    b = np.asarray(boxes, np.float32).reshape(-1, 5)
    if len(b) > 1:
        b = b[rng.permutation(len(b))]  # randomize_boxes: which boxes survive max_boxes is random
    return _core.correct_boxes(np.ascontiguousarray(b), p.pleft, p.ptop, p.swidth, p.sheight, p.flip, ow, oh, net_w,
                               net_h, max_boxes)


def mean_colour(img: np.ndarray) -> List[float]:
    """cv2.mean(img) per channel, to the bit (an exact integer sum times 1 / pixels, as cv::mean
    computes it), from cv2.sumElems (integer sums per channel, exact in a double below 2^53): 45-58 us
    at 416x416 on one core, where summing the columns of a cv2.reduce took 96-102 and cv2.mean 114."""
    h, w = img.shape[:2]
    c = 1 if img.ndim == 2 else img.shape[2]
    return [total * (1.0 / (h * w)) for total in cv2.sumElems(img)[:c]]


def crop_resize(img: np.ndarray, p: CropParams, net_w: int, net_h: int) -> np.ndarray:
    """image_data_augmentation's crop and resize: the crop rectangle (parts outside the image take
    the image's mean colour), bilinear resize to the network size. Per channel: the order of the
    channels (RGB or BGR) does not matter."""
    oh, ow = img.shape[:2]
    x0, y0 = max(p.pleft, 0), max(p.ptop, 0)
    x1, y1 = min(p.pleft + p.swidth, ow), min(p.ptop + p.sheight, oh)
    inside = img[y0:y1, x0:x1]  # a view: OpenCV reads it in place
    if (x0, y0, x1, y1) != (p.pleft, p.ptop, p.pleft + p.swidth, p.ptop + p.sheight):
        # the crop reaches outside the image: pad with the mean colour (cv::mean, rounded into 8 bits)
        c = 1 if img.ndim == 2 else img.shape[2]
        mean = [float(min(max(round(v), 0), 255)) for v in mean_colour(img)]  # round: half to even, as np.rint
        if x1 <= x0 or y1 <= y0:  # no overlap at all
            crop = np.empty((p.sheight, p.swidth) + img.shape[2:], np.uint8)
            crop[...] = mean if c > 1 else mean[0]
        else:
            crop = cv2.copyMakeBorder(inside, y0 - p.ptop, p.ptop + p.sheight - y1, x0 - p.pleft,
                                      p.pleft + p.swidth - x1, cv2.BORDER_CONSTANT, value=mean + [0] * (4 - c))
        inside = crop
    return cv2.resize(inside, (net_w, net_h), interpolation=cv2.INTER_LINEAR)


_LEVELS = np.arange(256, dtype=np.float64)


def _hsv_lut(dhue: float, dsat: float, dexp: float) -> np.ndarray:
    """The 8-bit look-up table of the HSV step: H + 179 dhue, S * dsat, V * dexp, each rounded and
    saturated to [0, 255] as cv::Mat arithmetic does. Written column by column into one array (the same
    float64 operations as stacking three new ones and clipping): 13 us a table instead of 21 (medians)."""
    lut = np.empty((256, 3))
    np.add(_LEVELS, 179 * dhue, out=lut[:, 0])
    np.multiply(_LEVELS, dsat, out=lut[:, 1])
    np.multiply(_LEVELS, dexp, out=lut[:, 2])
    np.rint(lut, out=lut)
    return np.minimum(np.maximum(lut, 0, out=lut), 255, out=lut).astype(np.uint8).reshape(1, 256, 3)


def distort_hsv(rgb: np.ndarray, dhue: float, dsat: float, dexp: float, bgr: bool = False) -> np.ndarray:
    """image_data_augmentation's colour step on an 8-bit RGB image, in OpenCV's 8-bit HSV
    (H in [0, 180)): S *= dsat, V *= dexp, H += 179 * dhue, each saturated to [0, 255] (so a hue
    pushed below 0 sticks at 0, one above 179 wraps in the conversion back, as in Darknet);
    a one-channel image is only scaled by dexp. bgr=True: the image is BGR (as decoded); the result
    is RGB all the same (the conversions to and from HSV swap the channels for free)."""
    if dsat == 1 and dexp == 1 and dhue == 0:
        return cv2.cvtColor(rgb, cv2.COLOR_BGR2RGB) if bgr and rgb.ndim == 3 and rgb.shape[2] == 3 else rgb
    lut = _hsv_lut(dhue, dsat, dexp)
    if rgb.ndim == 2 or rgb.shape[2] == 1:
        return cv2.LUT(rgb, np.ascontiguousarray(lut[0, :, 2]))
    hsv = cv2.cvtColor(rgb, cv2.COLOR_BGR2HSV if bgr else cv2.COLOR_RGB2HSV)
    # one table per plane: 331 us at 416x416 on one core, split and merge included; one 3-channel table: 384 us
    planes = [cv2.LUT(plane, lut[0, :, c].copy()) for c, plane in enumerate(cv2.split(hsv))]
    return cv2.cvtColor(cv2.merge(planes), cv2.COLOR_HSV2RGB)


def augment_pixels(img: np.ndarray, p: CropParams, net_w: int, net_h: int, bgr: bool = False) -> np.ndarray:
    """Crop, resize, flip and HSV of one image (uint8 HxWxC RGB, or BGR with bgr=True) -> uint8 RGB
    at the network size. Crop, resize and flip work per channel, so a decoded BGR image goes through
    them as it is and the HSV step turns it into RGB: the same bits as converting it first."""
    return distort_hsv(crop_resize_flip(img, p, net_w, net_h), p.dhue, p.dsat, p.dexp, bgr)


def crop_resize_flip(img: np.ndarray, p: CropParams, net_w: int, net_h: int) -> np.ndarray:
    """crop_resize, then the horizontal flip if p says so."""
    sized = crop_resize(img, p, net_w, net_h)
    return cv2.flip(sized, 1) if p.flip else sized


def to_chw(img: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """uint8 HxWxC (or HxW) -> float32 CxHxW in [0, 1], as Darknet's mat_to_image (x / 255), into
    `out` if given (a row of the batch: no copy afterwards). A half `out` (batch_storage.py) gets the
    half of those floats from the C++ pass (hsv_into_chw without jitter: the same floats)."""
    if out is not None and out.dtype != np.float32:
        return hsv_into_chw(img, 0.0, 1.0, 1.0, out)
    planes = cv2.split(img) if img.ndim == 3 and img.shape[2] > 1 else [img.reshape(img.shape[:2])]
    if out is None:
        out = np.empty((len(planes),) + img.shape[:2], np.float32)
    for plane, dst in zip(planes, out):  # contiguous planes: a vectorised divide (a strided transpose is not)
        np.divide(plane, np.float32(255), out=dst)
    return out


def hsv_into_chw(img: np.ndarray, dhue: float, dsat: float, dexp: float, out: Optional[np.ndarray] = None,
                 bgr: bool = False, flip: bool = False) -> np.ndarray:
    """to_chw(distort_hsv(img, dhue, dsat, dexp, bgr), out) in one C++ pass (_core.pixels_into_batch,
    src-lib/cpu/loader_pixels.cpp, built per instruction set like the CPU kernels): OpenCV's 8-bit
    formulas, within one level of the OpenCV path (its vector blocks truncate, its scalar tail rounds;
    src-test/test_loader_pixels.py), the same bits without jitter. flip=True: the image mirrored left to
    right on the way (the same bits as cv2.flip first, without its pass). img and out may be views (a
    crop, a window of a batch row) whose rows hold their pixels side by side. out may be half
    (batch_storage.py: float16, or uint16 holding bf16): each float rounded to it on the way."""
    if out is None:
        out = np.empty((1 if img.ndim == 2 else img.shape[2],) + img.shape[:2], np.float32)
    jitter = not (dsat == 1 and dexp == 1 and dhue == 0)
    _core.pixels_into_batch(img, out, (dhue, dsat, dexp) if jitter else None, bgr, flip)  # tables built in C++
    return out


# ---- blur and noise -------------------------------------------------------------------------
@dataclass
class PixelNoise:
    """The per-image blur and noise choices of load_data_detection: blur 0 (none), 1 (the
    background outside the truth boxes, a 17x17 Gaussian) or the cfg's blur (the whole image,
    kernel blur // 2 * 2 + 1); noise: the standard deviation of the added noise (0: none)."""

    blur: int = 0
    noise: int = 0


def sample_pixel_noise(rng, opts: Dict[str, float]) -> PixelNoise:
    """Darknet's draws: blur one of {none, background, whole image} with equal odds when the cfg
    sets blur; gaussian_noise on half of the images when the cfg sets it. Draws nothing (keeping the
    random stream of the other choices) when neither is set."""
    use_blur, use_noise = int(opts.get("blur", 0)), int(opts.get("gaussian_noise", 0))
    blur = noise = 0
    if use_blur:
        kind = int(rng.integers(0, 3))  # rand_int(0, 2)
        blur = 0 if kind == 0 else (1 if kind == 1 else use_blur)
    if use_noise and rng.random() < 0.5:
        noise = use_noise
    return PixelNoise(blur, noise)


def smallest_box_side(truth: np.ndarray, net_w: int, net_h: int) -> int:
    """fill_truth_detection's min_w_h: the smallest width or height of the kept boxes in network
    pixels (0 without boxes)."""
    if len(truth) == 0:
        return 0
    return int(min(np.min(truth[:, 3] * net_w), np.min(truth[:, 4] * net_h)))


def blur_and_noise(img: np.ndarray, truth: np.ndarray, choice: PixelNoise, rng) -> np.ndarray:
    """image_data_augmentation's last steps on the 8-bit image at the network size: the blur (a
    whole-image blur is disabled when an object's side is below 8 x blur; a background blur keeps
    the boxes sharp), then the noise. As in Darknet (cv::randn into an 8-bit image), negative noise
    values saturate to 0, so the noise only brightens; the sum saturates at 255. A whole-image blur
    is reduced to a side of the smallest box / 8 (Darknet: \"disable blur if one of the objects is
    too small\"; reduced to 1 it blurs the background only, as there)."""
    h, w = img.shape[:2]
    blur = choice.blur
    if blur > 1 and smallest_box_side(truth, w, h) // 8 < blur:
        blur = smallest_box_side(truth, w, h) // 8  # Darknet: disabled if one of the objects is too small
    if blur:
        ksize = 17 if blur == 1 else (blur // 2) * 2 + 1
        blurred = cv2.GaussianBlur(img, (ksize, ksize), 0)
        if blur == 1:  # blur the background only: the truth boxes are copied back sharp
            for _, x, y, bw, bh in truth.tolist():
                if not x:
                    break
                left, top = int((x - bw / 2) * w), int((y - bh / 2) * h)
                x0, y0 = max(left, 0), max(top, 0)
                x1, y1 = min(left + int(bw * w), w), min(top + int(bh * h), h)
                if x1 > x0 and y1 > y0:
                    blurred[y0:y1, x0:x1] = img[y0:y1, x0:x1]
        img = blurred
    if choice.noise:
        sigma = min(max(choice.noise, 0), 127)
        noise = np.clip(np.rint(rng.normal(0.0, sigma, img.shape)), 0, 255).astype(np.uint8)
        img = cv2.add(img, noise)  # saturating
    return img


def augment_one(img: np.ndarray, boxes: np.ndarray, net_w: int, net_h: int, opts: Dict[str, float],
                rng, out: Optional[np.ndarray] = None, bgr: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """One training sample from one image (RGB, or BGR as decoded with bgr=True): (float32 CHW RGB in
    [0, 1], written into `out` if given (float32, or a half batch row: batch_storage.py); (n, 5)
    truth class-first)."""
    oh, ow = img.shape[:2]
    p = sample_crop(rng, ow, oh, net_w, net_h, opts)
    noise = sample_pixel_noise(rng, opts)
    truth = correct_truth(boxes, p, ow, oh, net_w, net_h, int(opts["max_boxes"]), rng)
    if noise.blur or noise.noise:  # they work on the 8-bit image after the colour step
        pixels = blur_and_noise(augment_pixels(img, p, net_w, net_h, bgr), truth, noise, rng)
        return to_chw(pixels, out), truth
    return hsv_into_chw(crop_resize(img, p, net_w, net_h), p.dhue, p.dsat, p.dexp, out, bgr, p.flip), truth


# ---- mixup ----------------------------------------------------------------------------------
def mixup(first: Tuple[np.ndarray, np.ndarray], second: Tuple[np.ndarray, np.ndarray],
          max_boxes: int, out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Darknet's mixup=1 for one image: two augmented samples blended half and half
    (blend_images_cv 0.5/0.5), the second's boxes appended to the first's up to max_boxes
    (blend_truth). The image goes into `out` if given (a half one: the blend's float32, rounded)."""
    (a, ta), (b, tb) = first, second
    half_out = out is not None and out.dtype != np.float32
    blended = np.add(np.float32(0.5) * a, np.float32(0.5) * b, out=None if half_out else out, dtype=np.float32)
    if half_out:
        blended = into_half(blended, out)
    truth = np.concatenate([ta.reshape(-1, 5), tb.reshape(-1, 5)])[:max_boxes]
    return blended, truth.astype(np.float32)


# ---- mosaic ---------------------------------------------------------------------------------
def _mosaic_truth(truth: np.ndarray, k: int, w: int, h: int, cut_x: int, cut_y: int, shifts: Sequence[int],
                  bound: bool) -> List[Tuple[float, float, float, float, float]]:
    """blend_truth_mosaic for the boxes of quadrant k (0 top-left, 1 top-right, 2 bottom-left,
    3 bottom-right): shifted into the mosaic, clipped to the image (or, with mosaic_bound, to the
    quadrant), kept when inside and at least one pixel wide and high."""
    left_shift, right_shift, top_shift, bot_shift = shifts
    out = []
    for cls, xb, yb, wb, hb in truth.tolist():
        xb += (cut_x - left_shift) / w if k in (1, 3) else -(w - cut_x - right_shift) / w
        yb += (cut_y - top_shift) / h if k in (2, 3) else -(h - cut_y - bot_shift) / h
        left, right = int((xb - wb / 2) * w), int((xb + wb / 2) * w)
        top, bot = int((yb - hb / 2) * h), int((yb + hb / 2) * h)
        if bound:  # Darknet's mosaic_bound=1: clip to the quadrant the image fills
            lb, rb = (0, cut_x) if k in (0, 2) else (cut_x, w)
            tb, bb = (0, cut_y) if k in (0, 1) else (cut_y, h)
            left, right, top, bot = max(left, lb), min(right, rb), max(top, tb), min(bot, bb)
            xb, wb = (right + left) / 2 / w, (right - left) / w
            yb, hb = (bot + top) / 2 / h, (bot - top) / h
        else:  # default: clip to the whole mosaic only, so a box may reach into the next quadrant
            if left < 0:
                xb, wb = xb - left / w / 2, wb + left / w
            if right > w:
                d = (right - w) / w
                xb, wb = xb - d / 2, wb - d
            if top < 0:
                yb, hb = yb - top / h / 2, hb + top / h
            if bot > h:
                d = (bot - h) / h
                yb, hb = yb - d / 2, hb - d
            left, right = int((xb - wb / 2) * w), int((xb + wb / 2) * w)
            top, bot = int((yb - hb / 2) * h), int((yb + hb / 2) * h)
        if (left >= 0 and right <= w and top >= 0 and bot <= h and 1.0 / w < wb < 1 and 1.0 / h < hb < 1
                and 0 < xb < 1 and 0 < yb < 1):
            out.append((cls, xb, yb, wb, hb))
    return out


def mosaic(images: Sequence[Tuple[np.ndarray, np.ndarray]], net_w: int, net_h: int, opts: Dict[str, float],
           rng, out: Optional[np.ndarray] = None, bgr: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """Darknet's mosaic: four (image, boxes) pairs, each augmented on its own at the network size,
    fill the four quadrants around a random cut point (20 %..80 % of each side); each quadrant
    shows the part of its image nearest the cut, shifted inward past any fill border. The image goes
    into `out` (float32 CHW RGB, or a half one: batch_storage.py) if given; bgr=True: the images are
    BGR (as decoded)."""
    w, h = net_w, net_h
    cut_x = int(rng.integers(int(w * 0.2), int(w * 0.8) + 1))  # rand_int: both ends included
    cut_y = int(rng.integers(int(h * 0.2), int(h * 0.8) + 1))
    channels = 1 if images[0][0].ndim == 2 else images[0][0].shape[2]
    if out is None:
        out = np.empty((channels, h, w), np.float32)
    truths: List[Tuple[float, ...]] = []
    max_boxes = int(opts["max_boxes"])
    for k, (img, boxes) in enumerate(images):
        oh, ow = img.shape[:2]
        p = sample_crop(rng, ow, oh, w, h, opts, mosaic_index=k)
        noise = sample_pixel_noise(rng, opts)
        truth = correct_truth(boxes, p, ow, oh, w, h, max_boxes, rng)
        pleft, pright = (p.pright, p.pleft) if p.flip else (p.pleft, p.pright)
        left_shift = min(cut_x, max(0, _cdiv(-pleft * w, ow)))
        top_shift = min(cut_y, max(0, _cdiv(-p.ptop * h, oh)))
        right_shift = min(w - cut_x, max(0, _cdiv(-pright * w, ow)))
        bot_shift = min(h - cut_y, max(0, _cdiv(-p.pbot * h, oh)))
        sx0 = w - cut_x - right_shift if k in (0, 2) else left_shift  # source columns
        sy0 = h - cut_y - bot_shift if k in (0, 1) else top_shift  # source rows
        qw = cut_x if k in (0, 2) else w - cut_x
        qh = cut_y if k in (0, 1) else h - cut_y
        dx0 = 0 if k in (0, 2) else cut_x
        dy0 = 0 if k in (0, 1) else cut_y
        # the quadrants tile the image: each is written once, straight into its window of `out`, and
        # only its pixels go through the colour step (it works pixel by pixel)
        if noise.blur or noise.noise:  # they work on the 8-bit image after the colour step (and draw from rng)
            sized = blur_and_noise(augment_pixels(img, p, w, h, bgr), truth, noise, rng)
            colour, flip = (0, 1, 1, False), False
        else:  # the flip on the way into the batch: the flipped window [sx0, sx0 + qw) is [w - sx0 - qw, w - sx0)
            sized, colour, flip = crop_resize(img, p, w, h), (p.dhue, p.dsat, p.dexp, bgr), p.flip
        if qw and qh:
            dhue, dsat, dexp, is_bgr = colour
            x0 = w - sx0 - qw if flip else sx0
            hsv_into_chw(sized[sy0:sy0 + qh, x0:x0 + qw], dhue, dsat, dexp, out[:, dy0:dy0 + qh, dx0:dx0 + qw], is_bgr,
                         flip)
        room = max_boxes - len(truths)
        if room > 0:
            shifts = (left_shift, right_shift, top_shift, bot_shift)
            truths += _mosaic_truth(truth, k, w, h, cut_x, cut_y, shifts, bool(opts["mosaic_bound"]))[:room]
    return out, np.array(truths, np.float32).reshape(-1, 5)
