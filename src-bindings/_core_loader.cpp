// Bindings of the training loader's C++ parts: the colour pass (src-lib/cpu/loader_pixels.h), which
// data/augment.py's hsv_into_chw calls for each sample without the GIL, the box arithmetic
// (src-lib/loader_boxes.h) of its correct_truth, and the decoded images' cache (src-lib/loader_image_cache.h)
// that data/image_cache.py keeps in shared memory.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "arg_checks.h"
#include "bindings.h"
#include "cpu/loader_pixels.h"
#include "loader_boxes.h"
#include "loader_image_cache.h"
#include "loader_jitter.h"
#include "loader_seed.h"

using namespace dn;
using namespace dn_py;

namespace {

std::string described(const py::array& a) {
    std::string s = std::string(py::str(a.dtype())) + " array of shape (";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    s += a.ndim() == 1 ? ",)" : ")";
    std::string strides;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) strides += (i ? ", " : "") + std::to_string(a.strides(i));
    return s + " and strides (" + strides + ")";
}

// The pointer to an image cache's region (a writable buffer: a SharedMemory's buf), checked to be one.
uint8_t* cache_region(const std::string& call, const py::buffer& region) {
    py::buffer_info info = region.request(true);
    int64_t size = (int64_t)info.size * info.itemsize;
    if (!image_cache_valid(info.ptr, size))
        bad_arg(call, "region", "the shared memory of an image cache (image_cache_init's layout)",
                "a buffer of " + std::to_string(size) + " bytes without it");
    return static_cast<uint8_t*>(info.ptr);  // the buffer's owner (the caller's SharedMemory) keeps it mapped
}

int64_t cache_index(const std::string& call, const uint8_t* region, int64_t index) {
    int64_t entries = image_cache_entries(region);
    if (index < 0 || index >= entries)
        bad_arg(call, "index", "in 0.." + std::to_string(entries - 1), std::to_string(index));
    return index;
}

}  // namespace

void bind_loader(py::module_& m) {
    m.def("pixels_into_batch", [](const py::array& img, py::array& out, const py::object& tables, bool bgr,
                                  bool flip) {
        const std::string call = "pixels_into_batch";
        // views are welcome (a crop of the image, a window of the batch row: a mosaic quadrant) as long
        // as each row's pixels lie side by side
        int c = img.ndim() == 3 ? (int)img.shape(2) : 1;
        if (img.dtype().kind() != 'u' || img.itemsize() != 1 || (img.ndim() != 2 && img.ndim() != 3) ||
            (c != 1 && c != 3) || img.strides(1) != c || (img.ndim() == 3 && img.strides(2) != 1) ||
            img.shape(0) < 1 || img.shape(1) < 1)
            bad_arg(call, "image", "a uint8 HxW, HxWx1 or HxWx3 array (a view is fine) whose rows hold their "
                    "pixels side by side", described(img));
        int h = (int)img.shape(0), w = (int)img.shape(1);
        std::optional<DType> type = batch_storage(out);
        const py::ssize_t item = type ? (py::ssize_t)dtype_size(*type) : 4;
        if (!type || !out.writeable() || out.ndim() != 3 || out.shape(0) != c || out.shape(1) != h ||
            out.shape(2) != w || out.strides(2) != item || out.strides(1) % item || out.strides(0) % item)
            bad_arg(call, "out", "a writable float32 (or half: float16, uint16 holding bf16) array of shape (" +
                    std::to_string(c) + ", " + std::to_string(h) + ", " + std::to_string(w) +
                    ") (the image's CxHxW; a view is fine) whose rows are contiguous", described(out));
        py::array lut;
        uint8_t built[3 * 256];  // the tables of jitter factors (a tuple), built here: no NumPy calls a sample
        if (py::isinstance<py::tuple>(tables)) {
            py::tuple factors = tables;
            const std::string expected = "a tuple of 3 floats (dhue, dsat, dexp)";
            if (factors.size() != 3) bad_arg(call, "tables", expected, std::to_string(factors.size()) + " entries");
            double f[3];
            for (size_t i = 0; i < 3; ++i) {
                PyObject* number = PyNumber_Float(factors[i].ptr());  // float(x): any real number
                if (!number) {
                    PyErr_Clear();
                    bad_arg(call, "tables", expected,
                            "a " + std::string(py::str(py::type::of(factors[i]).attr("__name__"))) + " in it");
                }
                f[i] = PyFloat_AS_DOUBLE(number);
                Py_DECREF(number);
            }
            hsv_jitter_tables(f[0], f[1], f[2], built);
        } else if (!tables.is_none()) {
            if (!py::isinstance<py::array>(tables) || py::array(tables).dtype().kind() != 'u' ||
                py::array(tables).itemsize() != 1 || py::array(tables).size() != 3 * 256)
                bad_arg(call, "tables", "None or 256 x 3 uint8 (the new hue, saturation and value of each level), or "
                        "a tuple (dhue, dsat, dexp)",
                        py::isinstance<py::array>(tables) ? described(py::array(tables))
                                                          : std::string(py::str(py::type::of(tables).attr("__name__"))));
            lut = py::array_t<uint8_t, py::array::c_style>::ensure(tables);
        }
        PixelsIntoBatch p;
        p.src = (const uint8_t*)img.data();
        p.w = w, p.h = h, p.channels = c;
        p.src_row_stride = img.strides(0);
        p.bgr = bgr, p.flip = flip;
        p.tables = tables.is_none() ? nullptr : py::isinstance<py::tuple>(tables) ? built : (const uint8_t*)lut.data();
        p.dst = out.mutable_data();
        p.dst_type = *type;
        p.dst_plane_stride = out.strides(0) / item, p.dst_row_stride = out.strides(1) / item;
        py::gil_scoped_release nogil;
        pixels_into_batch(p);
    }, py::arg("image"), py::arg("out"), py::arg("tables") = py::none(), py::arg("bgr") = false,
       py::arg("flip") = false,
       "The training loader's last pixel pass: a uint8 HxWxC image (BGR with bgr=True) through the HSV jitter "
       "tables (256 x 3 uint8: the new hue, saturation and value of each level; a tuple (dhue, dsat, dexp): those "
       "augment._hsv_lut makes of the factors, built here; None: no jitter) into `out`, "
       "float32 CxHxW RGB in [0, 1] (a batch row or a window of one), mirrored left to right with flip=True, in one "
       "pass without the GIL, in the copy of the CPU kernels cpu_isa() names. A float16 `out` gets the fp16 of "
       "each float, a uint16 one its bf16 bits (round to nearest even, as half_bits): a half training batch.");

    m.def("image_cache_region_bytes", [](int64_t entries, int64_t capacity) {
        if (entries < 0 || capacity < 0)
            bad_arg("image_cache_region_bytes", "entries, capacity", "non-negative",
                    std::to_string(entries) + ", " + std::to_string(capacity));
        return image_cache_region_bytes(entries, capacity);
    }, py::arg("entries"), py::arg("capacity"),
       "Bytes of an image cache's region for `entries` images and `capacity` bytes of pixels.");

    m.def("image_cache_init", [](const py::buffer& region, int64_t entries, int64_t capacity) {
        py::buffer_info info = region.request(true);
        int64_t need = image_cache_region_bytes(std::max<int64_t>(entries, 0), std::max<int64_t>(capacity, 0));
        if (entries < 0 || capacity < 0 || (int64_t)info.size * info.itemsize < need)
            bad_arg("image_cache_init", "region", "a writable buffer of at least " + std::to_string(need) + " bytes",
                    std::to_string((int64_t)info.size * info.itemsize) + " bytes");
        image_cache_init(info.ptr, entries, capacity);
    }, py::arg("region"), py::arg("entries"), py::arg("capacity"),
       "Lays out an image cache in `region` (a writable buffer of image_cache_region_bytes bytes).");

    m.def("image_cache_find", [](const py::buffer& region, int64_t index) -> py::object {
        uint8_t* base = cache_region("image_cache_find", region);
        CachedImage found;
        if (!image_cache_find(base, cache_index("image_cache_find", base, index), &found)) return py::none();
        return py::make_tuple(found.offset, found.rows, found.cols, found.channels);
    }, py::arg("region"), py::arg("index"),
       "(offset, rows, cols, channels) of image `index` in the cache (channels 0: a 2-D image), or None.");

    m.def("image_cache_store", [](const py::buffer& region, int64_t index, const py::array& image) {
        const std::string call = "image_cache_store";
        uint8_t* base = cache_region(call, region);
        cache_index(call, base, index);
        if (image.dtype().kind() != 'u' || image.itemsize() != 1 || (image.ndim() != 2 && image.ndim() != 3) ||
            !(image.flags() & py::array::c_style) || image.shape(0) < 1 || image.shape(1) < 1 ||
            image.shape(0) > INT32_MAX || image.shape(1) > INT32_MAX || (image.ndim() == 3 && image.shape(2) > 4))
            bad_arg(call, "image", "a C-contiguous uint8 HxW or HxWxC array (C <= 4)", described(image));
        int channels = image.ndim() == 3 ? (int)image.shape(2) : 0;
        const uint8_t* pixels = (const uint8_t*)image.data();
        py::gil_scoped_release nogil;
        return image_cache_store(base, index, pixels, (int)image.shape(0), (int)image.shape(1), channels);
    }, py::arg("region"), py::arg("index"), py::arg("image"),
       "Stores image `index` (a decoded image) in the cache unless another worker has, or the cache is full "
       "(it is then not tried again); whether it was stored.");

    m.def("image_cache_stats", [](const py::buffer& region) {
        ImageCacheStats s = image_cache_stats(cache_region("image_cache_stats", region));
        py::dict d;
        d["images"] = s.entries, d["capacity"] = s.capacity, d["used"] = s.used, d["stored"] = s.stored;
        d["hits"] = s.hits, d["misses"] = s.misses;
        return d;
    }, py::arg("region"), "The cache's images (entries), capacity and used bytes, images stored, and finds that hit "
       "or missed.");

    m.def("seed_sequence_state", [](const std::vector<uint32_t>& entropy, int n_words, bool uint64) {
        if (n_words < 0 || n_words > (1 << 20)) bad_arg("seed_sequence_state", "n_words", "in 0..2^20", std::to_string(n_words));
        py::array out = uint64 ? (py::array)py::array_t<uint64_t>(n_words) : (py::array)py::array_t<uint32_t>(n_words);
        std::vector<uint32_t> words((uint64 ? 2 : 1) * (size_t)n_words);
        seed_sequence_state(entropy.data(), (int)entropy.size(), words.data(), (int)words.size());
        if (uint64)  // NumPy's generate_state(n, np.uint64): word pairs read little-endian
            for (int i = 0; i < n_words; ++i)
                ((uint64_t*)out.mutable_data())[i] = words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
        else
            std::copy(words.begin(), words.end(), (uint32_t*)out.mutable_data());
        return out;
    }, py::arg("entropy"), py::arg("n_words"), py::arg("uint64") = false,
       "np.random.SeedSequence(entropy).generate_state(n_words, np.uint64 if uint64 else np.uint32) for entropy "
       "given as uint32 words (each non-negative int of a seed list as its 32-bit words, least significant "
       "first): NumPy's algorithm, default pool size, no spawn key (data/sampler.py's per-sample Generator).");

    m.def("correct_boxes", [](const py::array& boxes, int pleft, int ptop, int swidth, int sheight, bool flip, int ow,
                              int oh, int net_w, int net_h, int max_boxes) {
        const std::string call = "correct_boxes";
        if (boxes.dtype().kind() != 'f' || boxes.itemsize() != 4 || boxes.ndim() != 2 || boxes.shape(1) != 5 ||
            !(boxes.flags() & py::array::c_style))
            bad_arg(call, "boxes", "a C-contiguous float32 array of shape (n, 5)", described(boxes));
        if (swidth < 1 || sheight < 1 || ow < 1 || oh < 1 || net_w < 1 || net_h < 1)
            bad_arg(call, "sizes", "swidth, sheight, ow, oh, net_w and net_h of at least 1",
                    std::to_string(swidth) + ", " + std::to_string(sheight) + ", " + std::to_string(ow) + ", " +
                    std::to_string(oh) + ", " + std::to_string(net_w) + ", " + std::to_string(net_h));
        int n = (int)boxes.shape(0);
        std::vector<float> kept(5 * (size_t)n);
        BoxCrop crop{pleft, ptop, swidth, sheight, flip, ow, oh, net_w, net_h};
        int count = correct_boxes((const float*)boxes.data(), n, crop, max_boxes, kept.data());
        py::array_t<float> out({(py::ssize_t)count, (py::ssize_t)5});
        std::copy(kept.begin(), kept.begin() + 5 * (size_t)count, out.mutable_data());
        return out;
    }, py::arg("boxes"), py::arg("pleft"), py::arg("ptop"), py::arg("swidth"), py::arg("sheight"), py::arg("flip"),
       py::arg("ow"), py::arg("oh"), py::arg("net_w"), py::arg("net_h"), py::arg("max_boxes"),
       "Darknet's correct_boxes for one training image (data/augment.py's correct_truth after its shuffle): boxes, "
       "(n, 5) float32 class, cx, cy, w, h normalised to the ow x oh source image, moved into the crop (pleft, ptop, "
       "swidth, sheight in source pixels), mirrored with flip, clipped to [0, 1]; of the first max_boxes, those "
       "kept (inside the image, not at x = y = 0, at least one net_w x net_h network pixel wide and high), as an "
       "(m, 5) float32 array.");
}
