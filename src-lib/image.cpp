#include "image.h"

#include "errors.h"

namespace dn {

PlanarImage from_bgr_u8(const uint8_t* pixels, int w, int h, int channels, size_t row_stride) {
    if (w <= 0 || h <= 0) throw DarknetError("image is empty (" + std::to_string(w) + "x" + std::to_string(h) + ")");
    if (channels != 1 && channels != 3 && channels != 4)
        throw DarknetError("image has " + std::to_string(channels) + " channels; expected 1 (grey), 3 (BGR) or 4 (BGRA)");
    PlanarImage im;
    im.w = w, im.h = h, im.c = channels == 1 ? 1 : 3;
    im.data.resize((size_t)im.c * w * h);
    size_t plane = (size_t)w * h;
    for (int y = 0; y < h; ++y) {
        const uint8_t* row = pixels + y * row_stride;
        for (int x = 0; x < w; ++x) {
            const uint8_t* p = row + (size_t)x * channels;
            size_t i = (size_t)y * w + x;
            if (im.c == 1) {
                im.data[i] = p[0] / 255.0f;
            } else {  // BGR -> RGB planes
                im.data[i] = p[2] / 255.0f;
                im.data[plane + i] = p[1] / 255.0f;
                im.data[2 * plane + i] = p[0] / 255.0f;
            }
        }
    }
    return im;
}

// Both resizes index the source by its size: an empty or inconsistent image must stop here.
static void check_resize(const PlanarImage& im, int w, int h) {
    if (w <= 0 || h <= 0) throw DarknetError("cannot resize to " + std::to_string(w) + "x" + std::to_string(h));
    if (im.w <= 0 || im.h <= 0 || im.c <= 0 || im.data.size() != (size_t)im.c * im.h * im.w)
        throw DarknetError("cannot resize an empty or inconsistent image (" + std::to_string(im.w) + "x" +
                           std::to_string(im.h) + "x" + std::to_string(im.c) + ", " + std::to_string(im.data.size()) +
                           " values)");
}

PlanarImage resize_darknet(const PlanarImage& im, int w, int h) {
    check_resize(im, w, h);
    if (im.w == w && im.h == h) return im;
    // Darknet's two passes: horizontal (each source row to w columns), then vertical (each output row
    // from two of those rows). Darknet keeps the whole horizontal pass (w x im.h per channel: 2 GB for
    // a 20000-pixel-tall image at width 8192); here the two rows the vertical pass reads are computed
    // when it needs them. Same operations on the same values, so the same bits.
    float w_scale = w > 1 ? (float)(im.w - 1) / (w - 1) : 0.0f;
    float h_scale = h > 1 ? (float)(im.h - 1) / (h - 1) : 0.0f;
    std::vector<float> rows(2 * (size_t)w);  // source row y's horizontal pass is in slot y % 2
    int held[2];
    auto horizontal = [&](int k, int y) -> const float* {
        float* dst = rows.data() + (size_t)(y & 1) * w;
        if (held[y & 1] == y) return dst;
        held[y & 1] = y;
        const float* src = im.data.data() + ((size_t)k * im.h + y) * im.w;
        for (int c = 0; c < w; ++c) {
            if (c == w - 1 || im.w == 1) {
                dst[c] = src[im.w - 1];
            } else {
                float sx = c * w_scale;
                int ix = (int)sx;
                float dx = sx - ix;
                dst[c] = (1 - dx) * src[ix] + dx * src[ix + 1];
            }
        }
        return dst;
    };
    PlanarImage out;
    out.w = w, out.h = h, out.c = im.c;
    out.data.assign((size_t)im.c * w * h, 0.0f);
    for (int k = 0; k < im.c; ++k) {
        held[0] = held[1] = -1;
        for (int r = 0; r < h; ++r) {
            float sy = r * h_scale;
            int iy = (int)sy;
            float dy = sy - iy;
            const float* p0 = horizontal(k, iy);
            float* dst = out.data.data() + ((size_t)k * h + r) * w;
            for (int c = 0; c < w; ++c) dst[c] = (1 - dy) * p0[c];
            if (r == h - 1 || im.h == 1) continue;
            const float* p1 = horizontal(k, iy + 1);
            for (int c = 0; c < w; ++c) dst[c] += dy * p1[c];
        }
    }
    return out;
}

PlanarImage letterbox_darknet(const PlanarImage& im, int w, int h) {
    check_resize(im, w, h);
    int new_w = im.w, new_h = im.h;
    if ((float)w / im.w < (float)h / im.h) {
        new_w = w;
        new_h = (im.h * w) / im.w;
    } else {
        new_h = h;
        new_w = (im.w * h) / im.h;
    }
    new_w = new_w < 1 ? 1 : new_w;
    new_h = new_h < 1 ? 1 : new_h;
    PlanarImage resized = resize_darknet(im, new_w, new_h);
    PlanarImage boxed;
    boxed.w = w, boxed.h = h, boxed.c = im.c;
    boxed.data.assign((size_t)im.c * w * h, 0.5f);
    int dx = (w - new_w) / 2, dy = (h - new_h) / 2;
    for (int k = 0; k < im.c; ++k)
        for (int y = 0; y < new_h; ++y)
            for (int x = 0; x < new_w; ++x)
                boxed.data[((size_t)k * h + y + dy) * w + x + dx] = resized.data[((size_t)k * new_h + y) * new_w + x];
    return boxed;
}

}  // namespace dn
