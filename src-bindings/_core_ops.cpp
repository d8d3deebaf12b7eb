// _core.Ops: one backend's ops callable on NumPy arrays, for the op parity harness (src-test/test_ops.py).
// Arguments go to the backend's memory (uploaded on a GPU), results come back as NumPy copies.
// Every op's arguments are checked against its contract first (arg_checks.h): the backends index raw
// memory by the shapes they are given, so a mismatch must stop here as a DarknetError.
#include <pybind11/stl.h>

#include <algorithm>

#include "backend.h"
#include "arg_checks.h"
#include "bindings.h"
#include "devices.h"
#include "gpu/gpu_backend.h"

using namespace dn;
using namespace dn_py;

namespace {

// Op-level access for the parity tests (src-test/test_ops.py): each call runs one Backend op.
struct Ops {
    std::unique_ptr<Backend> be;
    explicit Ops(const std::string& name) : be(make_backend(name)) {}
    explicit Ops(std::unique_ptr<Backend> b) : be(std::move(b)) {}
    Tensor in(const FloatArray& a) { return be->adopt(to_tensor(a)); }  // an argument, in the backend's memory
    Tensor out(Shape s) {                                                 // a zeroed result
        Tensor t = be->alloc(s);
        be->fill(t, 0.0f);
        return t;
    }
    Tensor skip_flag(bool skip) {  // the optimizers' 1-element overflow flag (backend.h sgd_update)
        Tensor t = out(Shape{1, 1, 1, 1});
        if (skip) be->fill(t, 1.0f);
        return t;
    }
    // Activations (not parameters) in `storage`: the ops of storage_kernels.h take fp16 / bf16 there
    // (src-lib/gpu/PRECISION.md); the host copies round to nearest even on the way up.
    // ... and in `layout` (tensor.h Layout: the host copies transpose NHWC ones).
    DType storage = DType::f32;
    Layout layout = Layout::nchw;
    Tensor act(const FloatArray& a) {
        Tensor host = to_tensor(a), t = be->alloc(host.shape(), storage, layout);
        copy_tensor(host, t);
        return t;
    }
    Tensor act_out(Shape s) {
        Tensor t = be->alloc(s, storage, layout);
        copy_tensor(Tensor(s), t);  // zeros
        return t;
    }
};

// An activation named by the caller of op, or a DarknetError naming it.
Activation activation_argument(const char* op, const std::string& name) {
    bool ok;
    Activation a = activation_from_name(name, &ok);
    if (!ok) throw DarknetError(std::string(op) + ": unknown activation " + name);
    return a;
}

}  // namespace

void bind_ops(py::module_& m) {
    py::class_<Ops>(m, "Ops", "One backend's ops, callable on NumPy arrays (for the op parity tests).")
        .def(py::init<const std::string&>())
        .def(py::init([](std::shared_ptr<Device> d) { return std::make_unique<Ops>(std::make_unique<GpuBackend>(d)); }),
             "GpuBackend on a device object (the test devices of _core_test_devices.cpp)")
        .def("limit_group_size", [](Ops& o, int n) {
            auto* gpu = dynamic_cast<GpuBackend*>(o.be.get());
            if (!gpu) throw DarknetError(std::string(o.be->name()) + " has no kernels to limit");
            gpu->limit_group_size((uint32_t)std::max(1, n));
        }, "Caps the threads per group of every kernel (GPU backends; for tests).")
        .def_property("storage", [](const Ops& o) { return std::string(dtype_name(o.storage)); },
                      [](Ops& o, const std::string& name) {
                          DType t = parse_dtype(name);
                          auto runs = o.be->storage_types();
                          if (std::find(runs.begin(), runs.end(), t) == runs.end()) {
                              std::string names;
                              for (DType r : runs) names += std::string(names.empty() ? "" : ", ") + dtype_name(r);
                              throw DarknetError("precision " + name + " does not run on " + o.be->name() +
                                                 " (it runs: " + names + ")");
                          }
                          o.storage = t;
                      },
                      "Storage type of the activation arguments and results of conv2d, conv2d_affine_act, activate, "
                      "pool, copy_channels, shortcut, upsample and yolo_activate's input, and of the activations and "
                      "their gradients in bias_backward, batchnorm_train/backward, batchnorm_activate_train/backward, "
                      "activate_backward, pool_backward, add_channels, shortcut_backward, upsample_backward, fill and "
                      "add_scaled's y (parameters, their gradients and statistics stay fp32).")
        .def_property("layout", [](const Ops& o) { return std::string(layout_name(o.layout)); },
                      [](Ops& o, const std::string& name) {
                          if (name != "nchw" && name != "nhwc")
                              throw DarknetError("layout '" + name + "': nchw or nhwc");
                          if (name == "nhwc" && !o.be->device())
                              throw DarknetError(std::string("layout nhwc: ") + o.be->name() + " holds NCHW only");
                          o.layout = name == "nhwc" ? Layout::nhwc : Layout::nchw;
                      },
                      "Layout of the activation arguments and results that `storage` applies to ('nchw', or 'nhwc' "
                      "on a GPU device): arrays in and out stay NCHW; an op without an NHWC path refuses them.")
        .def("fallback_counts", [](Ops& o) {
            const auto* c = o.be->fallback_counts();
            return c ? *c : std::map<std::string, int>{};
        }, "How often each op ran on the CPU instead of the device, and each fast path failed (\"mps_conv2d failed\").")
        .def("gemm", [](Ops& o, bool ta, bool tb, float alpha, const FloatArray& A, const FloatArray& B, float beta,
                        const FloatArray& C) {
            const char* op = "Ops.gemm";
            check_ndim(op, "A", A, 2), check_ndim(op, "B", B, 2), check_ndim(op, "C", C, 2);
            int M = (int)C.shape(0), N = (int)C.shape(1), K = ta ? (int)A.shape(0) : (int)A.shape(1);
            int am = ta ? (int)A.shape(1) : (int)A.shape(0);
            int bk = tb ? (int)B.shape(1) : (int)B.shape(0), bn = tb ? (int)B.shape(0) : (int)B.shape(1);
            if (am != M) bad_arg(op, "A", std::string("of ") + (ta ? "KxM" : "MxK") + " with M = C's rows (" + std::to_string(M) + ")", dims_str(A));
            if (bk != K || bn != N)
                bad_arg(op, "B", std::string("of ") + (tb ? "NxK" : "KxN") + " with K = " + std::to_string(K) + ", N = " + std::to_string(N), dims_str(B));
            Tensor tA = o.in(A), tB = o.in(B), tC = o.in(C);
            o.be->gemm(ta, tb, M, N, K, alpha, tA, (int)A.shape(1), tB, (int)B.shape(1), beta, tC, N);
            return to_numpy(tC).reshape(std::vector<py::ssize_t>{M, N});
        })
        .def("conv2d", [](Ops& o, const FloatArray& x, const FloatArray& w, int stride_y, int stride_x, int pad,
                          int dilation, int groups, int out_h, int out_w) {
            Shape xs = nchw("Ops.conv2d", "x", x), ws = nchw("Ops.conv2d", "w", w);
            ConvGeom g{ws.h, ws.w, stride_y, stride_x, pad, dilation, groups};
            Shape ys = conv_output("Ops.conv2d", xs, ws, g, out_h, out_w);
            Tensor tx = o.act(x), tw = o.in(w), y = o.act_out(ys);
            o.be->conv2d(tx, tw, g, y);
            return to_numpy(y);
        })
        .def("conv2d_affine_act", [](Ops& o, const FloatArray& x, const FloatArray& w, int stride_y, int stride_x,
                                     int pad, int dilation, int groups, int out_h, int out_w, py::object scale,
                                     const FloatArray& shift, const std::string& act) {
            const char* op = "Ops.conv2d_affine_act";
            Activation a = activation_argument(op, act);
            Shape xs = nchw(op, "x", x), ws = nchw(op, "w", w);
            ConvGeom g{ws.h, ws.w, stride_y, stride_x, pad, dilation, groups};
            Shape ys = conv_output(op, xs, ws, g, out_h, out_w);
            check_size(op, "shift", shift.size(), ws.n);
            FloatArray scale_a = scale.is_none() ? FloatArray() : scale.cast<FloatArray>();
            if (!scale.is_none()) check_size(op, "scale", scale_a.size(), ws.n);
            Tensor tx = o.act(x), tw = o.in(w), y = o.act_out(ys);
            Tensor sc, sh = o.in(shift);
            if (!scale.is_none()) sc = o.in(scale_a);
            o.be->conv2d_affine_act(tx, tw, g, scale.is_none() ? nullptr : &sc, sh, a, y);
            return to_numpy(y);
        }, "scale may be None")
        .def("add_bias", [](Ops& o, const FloatArray& x, const FloatArray& b) {
            check_size("Ops.add_bias", "b", b.size(), nchw("Ops.add_bias", "x", x).c);
            Tensor t = o.in(x);
            o.be->add_bias(t, o.in(b));
            return to_numpy(t);
        })
        .def("batchnorm_inference", [](Ops& o, const FloatArray& x, const FloatArray& mean, const FloatArray& var,
                                       const FloatArray& scale, const FloatArray& bias, float eps) {
            const char* op = "Ops.batchnorm_inference";
            int c = nchw(op, "x", x).c;
            check_size(op, "mean", mean.size(), c), check_size(op, "var", var.size(), c);
            check_size(op, "scale", scale.size(), c), check_size(op, "bias", bias.size(), c);
            Tensor t = o.in(x);
            o.be->batchnorm_inference(t, o.in(mean), o.in(var), o.in(scale), o.in(bias), eps);
            return to_numpy(t);
        })
        .def("activate", [](Ops& o, const FloatArray& x, const std::string& name) {
            Activation a = activation_argument("Ops.activate", name);
            nchw("Ops.activate", "x", x);
            Tensor t = o.act(x);
            o.be->activate(t, a);
            return to_numpy(t);
        })
        .def("pool", [](Ops& o, const std::string& kind, const FloatArray& x, int size, int stride_y, int stride_x,
                        int padding, std::vector<int> out_shape) {
            PoolGeom g{size, stride_y, stride_x, padding};
            Shape given = shape_arg("Ops.pool", "out_shape", out_shape);
            Shape ys = pool_shape("Ops.pool", kind, nchw("Ops.pool", "x", x), g, given);
            check_shape("Ops.pool", "out_shape", given, ys);
            Tensor tx = o.act(x), y = o.act_out(ys);
            if (kind == "max") o.be->maxpool(tx, g, y);
            else if (kind == "local_avg") o.be->avgpool_local(tx, g, y);
            else if (kind == "global_avg") o.be->avgpool_global(tx, y);
            else if (kind == "max_depth") o.be->maxpool_depth(tx, y);
            else throw DarknetError("unknown pool kind " + kind);
            return to_numpy(y);
        })
        .def("copy_channels", [](Ops& o, const FloatArray& x, int src_c0, const FloatArray& y, int dst_c0, int count) {
            check_channel_copy("Ops.copy_channels", x, src_c0, y, dst_c0, count);
            Tensor tx = o.act(x), ty = o.act(y);
            o.be->copy_channels(tx, src_c0, ty, dst_c0, count);
            return to_numpy(ty);
        })
        .def("shortcut", [](Ops& o, const FloatArray& x, std::vector<FloatArray> from, const FloatArray& weights,
                            int weights_type, int norm) {
            check_shortcut("Ops.shortcut", x, from, weights, weights_type, norm);
            Tensor tx = o.act(x), y = o.act_out(tx.shape());
            std::vector<Tensor> fs;
            for (auto& f : from) fs.push_back(o.act(f));
            std::vector<const Tensor*> ptrs;
            for (auto& f : fs) ptrs.push_back(&f);
            Tensor tw = weights.size() ? o.in(weights) : Tensor();
            o.be->shortcut(tx, ptrs, weights.size() ? &tw : nullptr, (ShortcutWeights)weights_type,
                           (ShortcutNorm)norm, y);
            return to_numpy(y);
        })
        .def("upsample", [](Ops& o, const FloatArray& x, int stride, float scale) {
            Shape s = nchw("Ops.upsample", "x", x);
            check_min("Ops.upsample", "stride", stride, 1);
            Shape ys = result_shape("Ops.upsample", "the output", s.n, s.c, (int64_t)s.h * stride, (int64_t)s.w * stride);
            Tensor tx = o.act(x), y = o.act_out(ys);
            o.be->upsample(tx, stride, scale, y);
            return to_numpy(y);
        })
        .def("downsample_sum", [](Ops& o, const FloatArray& x, int stride, float scale) {
            Shape s = nchw("Ops.downsample_sum", "x", x);
            check_min("Ops.downsample_sum", "stride", stride, 1);
            Shape ys = result_shape("Ops.downsample_sum", "the output (x's size / stride)", s.n, s.c, s.h / stride, s.w / stride);
            Tensor tx = o.in(x), y = o.out(ys);
            o.be->downsample_sum(tx, stride, scale, y);
            return to_numpy(y);
        })
        .def("reorg", [](Ops& o, const FloatArray& x, int w, int h, int c, int stride, bool forward,
                         std::vector<int> out_shape) {
            Shape ys = shape_arg("Ops.reorg", "out_shape", out_shape);
            check_reorg("Ops.reorg", nchw("Ops.reorg", "x", x), ys, w, h, c, stride);
            Tensor tx = o.in(x), y = o.out(ys);
            o.be->reorg(tx, w, h, c, stride, forward, y);
            return to_numpy(y);
        })
        .def("scale_channels", [](Ops& o, const FloatArray& s, const FloatArray& from, bool scale_wh) {
            check_scale_channels("Ops.scale_channels", s, from, scale_wh);
            Tensor ts = o.in(s), tf = o.in(from), y = o.out(tf.shape());
            o.be->scale_channels(ts, tf, scale_wh, y);
            return to_numpy(y);
        })
        .def("mul", [](Ops& o, const FloatArray& a, const FloatArray& b) {
            check_shape("Ops.mul", "b", nchw("Ops.mul", "b", b), nchw("Ops.mul", "a", a));
            Tensor ta = o.in(a), tb = o.in(b), y = o.out(ta.shape());
            o.be->mul(ta, tb, y);
            return to_numpy(y);
        })
        .def("softmax", [](Ops& o, const FloatArray& x, int groups, float temperature) {
            check_groups("Ops.softmax", nchw("Ops.softmax", "x", x), groups);
            Tensor tx = o.in(x), y = o.out(tx.shape());
            o.be->softmax(tx, groups, temperature, y);
            return to_numpy(y);
        })
        // ---- training ops: each returns the accumulated gradient(s), starting from the given arrays
        .def("conv2d_backward_weights", [](Ops& o, const FloatArray& x, const FloatArray& dy, const FloatArray& dw,
                                           int stride_y, int stride_x, int pad, int dilation, int groups) {
            const char* op = "Ops.conv2d_backward_weights";
            Shape xs = nchw(op, "x", x), ws = nchw(op, "dw", dw), ys = nchw(op, "dy", dy);
            ConvGeom g{ws.h, ws.w, stride_y, stride_x, pad, dilation, groups};
            check_shape(op, "dy", ys, conv_output(op, xs, ws, g, ys.h, ys.w, "dy's HxW"));
            Tensor tx = o.act(x), tdy = o.act(dy), tdw = o.in(dw);  // dw: a parameter gradient, fp32
            o.be->conv2d_backward_weights(tx, tdy, g, tdw);
            return to_numpy(tdw);
        })
        .def("conv2d_backward_data", [](Ops& o, const FloatArray& dy, const FloatArray& w, const FloatArray& dx,
                                        int stride_y, int stride_x, int pad, int dilation, int groups) {
            const char* op = "Ops.conv2d_backward_data";
            Shape xs = nchw(op, "dx", dx), ws = nchw(op, "w", w), ys = nchw(op, "dy", dy);
            ConvGeom g{ws.h, ws.w, stride_y, stride_x, pad, dilation, groups};
            check_shape(op, "dy", ys, conv_output(op, xs, ws, g, ys.h, ys.w, "dy's HxW"));
            Tensor tdy = o.act(dy), tw = o.in(w), tdx = o.act(dx);
            o.be->conv2d_backward_data(tdy, tw, g, tdx);
            return to_numpy(tdx);
        })
        .def("bias_backward", [](Ops& o, const FloatArray& dy, const FloatArray& db) {
            check_size("Ops.bias_backward", "db", db.size(), nchw("Ops.bias_backward", "dy", dy).c);
            Tensor tdy = o.act(dy), tdb = o.in(db);
            o.be->bias_backward(tdy, tdb);
            return to_numpy(tdb);
        })
        .def("batchnorm_train", [](Ops& o, const FloatArray& x, const FloatArray& scale, const FloatArray& bias, float eps) {
            int c = nchw("Ops.batchnorm_train", "x", x).c;
            check_size("Ops.batchnorm_train", "scale", scale.size(), c);
            check_size("Ops.batchnorm_train", "bias", bias.size(), c);
            Tensor y = o.act(x), xn = o.act_out(y.shape()), mean = o.out(Shape{1, y.shape().c, 1, 1}),
                   var = o.out(Shape{1, y.shape().c, 1, 1});
            o.be->batchnorm_train(y, mean, var, xn, o.in(scale), o.in(bias), eps);
            return py::make_tuple(to_numpy(y), to_numpy(xn), to_numpy(mean).attr("ravel")(), to_numpy(var).attr("ravel")());
        }, "returns (y, x_norm, mean, var)")
        .def("batchnorm_backward", [](Ops& o, const FloatArray& dy, const FloatArray& x_norm, const FloatArray& scale,
                                      const FloatArray& var, float eps) {
            const char* op = "Ops.batchnorm_backward";
            Shape ys = nchw(op, "dy", dy);
            check_shape(op, "x_norm", nchw(op, "x_norm", x_norm), ys);
            check_size(op, "scale", scale.size(), ys.c), check_size(op, "var", var.size(), ys.c);
            Tensor tdy = o.act(dy), txn = o.act(x_norm);
            Tensor dscale = o.out(Shape{1, tdy.shape().c, 1, 1}), dbias = o.out(Shape{1, tdy.shape().c, 1, 1});
            o.be->batchnorm_backward(tdy, txn, o.in(scale), o.in(var), eps, dscale, dbias);
            return py::make_tuple(to_numpy(tdy), to_numpy(dscale).attr("ravel")(), to_numpy(dbias).attr("ravel")());
        }, "returns (dx, dscale, dbias)")
        .def("batchnorm_activate_train", [](Ops& o, const FloatArray& x, const FloatArray& scale,
                                            const FloatArray& bias, float eps, const std::string& name) {
            const char* op = "Ops.batchnorm_activate_train";
            Activation a = activation_argument(op, name);
            int c = nchw(op, "x", x).c;
            check_size(op, "scale", scale.size(), c), check_size(op, "bias", bias.size(), c);
            Tensor y = o.act(x), xn = o.act_out(y.shape()), mean = o.out(Shape{1, c, 1, 1}),
                   var = o.out(Shape{1, c, 1, 1});
            o.be->batchnorm_activate_train(y, mean, var, xn, o.in(scale), o.in(bias), eps, a);
            return py::make_tuple(to_numpy(y), to_numpy(xn), to_numpy(mean).attr("ravel")(), to_numpy(var).attr("ravel")());
        }, "batchnorm_train then an elementwise activation; returns (y, x_norm, mean, var)")
        .def("batchnorm_activate_backward", [](Ops& o, const FloatArray& dy, const FloatArray& y,
                                               const FloatArray& x_norm, const FloatArray& scale, const FloatArray& bias,
                                               const FloatArray& var, float eps, const std::string& name) {
            const char* op = "Ops.batchnorm_activate_backward";
            Activation a = activation_argument(op, name);
            Shape ys = nchw(op, "dy", dy);
            check_shape(op, "y", nchw(op, "y", y), ys), check_shape(op, "x_norm", nchw(op, "x_norm", x_norm), ys);
            check_size(op, "scale", scale.size(), ys.c), check_size(op, "bias", bias.size(), ys.c);
            check_size(op, "var", var.size(), ys.c);
            Tensor tdy = o.act(dy), ty = o.act(y), txn = o.act(x_norm);
            Tensor dscale = o.out(Shape{1, ys.c, 1, 1}), dbias = o.out(Shape{1, ys.c, 1, 1});
            o.be->batchnorm_activate_backward(tdy, ty, txn, o.in(scale), o.in(bias), o.in(var), eps, a, dscale, dbias);
            return py::make_tuple(to_numpy(tdy), to_numpy(dscale).attr("ravel")(), to_numpy(dbias).attr("ravel")());
        }, "given dy = dL/d(output), the forward's output y, x_norm and the batchnorm's scale and bias (whose "
           "x_norm * scale + bias is the pre-activation): returns (dx, dscale, dbias)")
        .def("activate_backward", [](Ops& o, const FloatArray& x, const FloatArray& dy, const std::string& name) {
            Activation a = activation_argument("Ops.activate_backward", name);
            check_shape("Ops.activate_backward", "dy", nchw("Ops.activate_backward", "dy", dy),
                        nchw("Ops.activate_backward", "x", x));
            Tensor tx = o.act(x), tdy = o.act(dy);
            o.be->activate_backward(tx, tdy, a);
            return to_numpy(tdy);
        })
        .def("pool_backward", [](Ops& o, const std::string& kind, const FloatArray& x, const FloatArray& dy, int size,
                                 int stride_y, int stride_x, int padding) {
            Shape dys = nchw("Ops.pool_backward", "dy", dy);
            check_shape("Ops.pool_backward", "dy", dys,
                        pool_shape("Ops.pool_backward", kind, nchw("Ops.pool_backward", "x", x),
                                   PoolGeom{size, stride_y, stride_x, padding}, dys));
            Tensor tx = o.act(x), tdy = o.act(dy), dx = o.act_out(tx.shape());
            PoolGeom g{size, stride_y, stride_x, padding};
            if (kind == "max") o.be->maxpool_backward(tx, tdy, g, dx);
            else if (kind == "local_avg") o.be->avgpool_local_backward(tx, tdy, g, dx);
            else if (kind == "global_avg") o.be->avgpool_global_backward(tdy, dx);
            else if (kind == "max_depth") o.be->maxpool_depth_backward(tx, tdy, dx);
            else throw DarknetError("unknown pool kind " + kind);
            return to_numpy(dx);
        })
        .def("add_channels", [](Ops& o, const FloatArray& x, int src_c0, const FloatArray& y, int dst_c0, int count) {
            check_channel_copy("Ops.add_channels", x, src_c0, y, dst_c0, count);
            Tensor tx = o.act(x), ty = o.act(y);
            o.be->add_channels(tx, src_c0, ty, dst_c0, count);
            return to_numpy(ty);
        })
        .def("shortcut_backward", [](Ops& o, const FloatArray& x, std::vector<FloatArray> from, const FloatArray& weights,
                                     int weights_type, int norm, const FloatArray& dy) {
            check_shape("Ops.shortcut_backward", "dy", nchw("Ops.shortcut_backward", "dy", dy),
                        check_shortcut("Ops.shortcut_backward", x, from, weights, weights_type, norm));
            Tensor tx = o.act(x), tdy = o.act(dy), dx = o.act_out(tx.shape());
            std::vector<Tensor> fs, dfs;
            for (auto& f : from) fs.push_back(o.act(f)), dfs.push_back(o.act_out(fs.back().shape()));
            std::vector<const Tensor*> ptrs;
            std::vector<Tensor*> dptrs;
            for (size_t k = 0; k < fs.size(); ++k) ptrs.push_back(&fs[k]), dptrs.push_back(&dfs[k]);
            Tensor tw = weights.size() ? o.in(weights) : Tensor();
            Tensor dw = o.out(Shape{1, 1, 1, (int)weights.size()});
            o.be->shortcut_backward(tx, ptrs, weights.size() ? &tw : nullptr, (ShortcutWeights)weights_type,
                                    (ShortcutNorm)norm, tdy, dx, dptrs, weights.size() ? &dw : nullptr);
            py::list dfrom;
            for (auto& t : dfs) dfrom.append(to_numpy(t));
            return py::make_tuple(to_numpy(dx), dfrom, to_numpy(dw).attr("ravel")());
        }, "returns (dx, [dfrom], dweights)")
        .def("upsample_backward", [](Ops& o, const FloatArray& dy, int stride, float scale, std::vector<int> x_shape) {
            Shape xs = shape_arg("Ops.upsample_backward", "x_shape", x_shape);
            check_min("Ops.upsample_backward", "stride", stride, 1);
            check_shape("Ops.upsample_backward", "dy", nchw("Ops.upsample_backward", "dy", dy),
                        result_shape("Ops.upsample_backward", "dy", xs.n, xs.c, (int64_t)xs.h * stride, (int64_t)xs.w * stride));
            Tensor tdy = o.act(dy), dx = o.act_out(xs);
            o.be->upsample_backward(tdy, stride, scale, dx);
            return to_numpy(dx);
        })
        .def("downsample_sum_backward", [](Ops& o, const FloatArray& dy, int stride, float scale, std::vector<int> x_shape) {
            Shape xs = shape_arg("Ops.downsample_sum_backward", "x_shape", x_shape);
            check_min("Ops.downsample_sum_backward", "stride", stride, 1);
            check_shape("Ops.downsample_sum_backward", "dy", nchw("Ops.downsample_sum_backward", "dy", dy),
                        result_shape("Ops.downsample_sum_backward", "dy", xs.n, xs.c, xs.h / stride, xs.w / stride));
            Tensor tdy = o.in(dy), dx = o.out(xs);
            o.be->downsample_sum_backward(tdy, stride, scale, dx);
            return to_numpy(dx);
        })
        .def("reorg_backward", [](Ops& o, const FloatArray& dy, int w, int h, int c, int stride, bool forward,
                                  std::vector<int> x_shape) {
            Shape xs = shape_arg("Ops.reorg_backward", "x_shape", x_shape);
            check_reorg("Ops.reorg_backward", nchw("Ops.reorg_backward", "dy", dy), xs, w, h, c, stride);
            Tensor tdy = o.in(dy), dx = o.out(xs);
            o.be->reorg_backward(tdy, w, h, c, stride, forward, dx);
            return to_numpy(dx);
        })
        .def("scale_channels_backward", [](Ops& o, const FloatArray& s, const FloatArray& from, bool scale_wh,
                                           const FloatArray& dy) {
            Shape fs = check_scale_channels("Ops.scale_channels_backward", s, from, scale_wh);
            check_shape("Ops.scale_channels_backward", "dy", nchw("Ops.scale_channels_backward", "dy", dy), fs);
            Tensor ts = o.in(s), tf = o.in(from), tdy = o.in(dy), ds = o.out(ts.shape()), df = o.out(tf.shape());
            o.be->scale_channels_backward(ts, tf, scale_wh, tdy, ds, df);
            return py::make_tuple(to_numpy(ds), to_numpy(df));
        })
        .def("mul_backward", [](Ops& o, const FloatArray& a, const FloatArray& b, const FloatArray& dy) {
            Shape as = nchw("Ops.mul_backward", "a", a);
            check_shape("Ops.mul_backward", "b", nchw("Ops.mul_backward", "b", b), as);
            check_shape("Ops.mul_backward", "dy", nchw("Ops.mul_backward", "dy", dy), as);
            Tensor ta = o.in(a), tb = o.in(b), tdy = o.in(dy), da = o.out(ta.shape()), db = o.out(tb.shape());
            o.be->mul_backward(ta, tb, tdy, da, db);
            return py::make_tuple(to_numpy(da), to_numpy(db));
        })
        .def("softmax_backward", [](Ops& o, const FloatArray& y, const FloatArray& dy, int groups, float temperature) {
            Shape ys = nchw("Ops.softmax_backward", "y", y);
            check_shape("Ops.softmax_backward", "dy", nchw("Ops.softmax_backward", "dy", dy), ys);
            check_groups("Ops.softmax_backward", ys, groups);
            Tensor ty = o.in(y), tdy = o.in(dy), dx = o.out(ty.shape());
            o.be->softmax_backward(ty, tdy, groups, temperature, dx);
            return to_numpy(dx);
        })
        .def("add_scaled", [](Ops& o, const FloatArray& x, float alpha, const FloatArray& y, bool x_in_storage) {
            check_size("Ops.add_scaled", "y", y.size(), x.size());
            Tensor tx = x_in_storage ? o.act(x) : o.in(x), ty = o.act(y);
            o.be->add_scaled(tx, alpha, ty);
            return to_numpy(ty);
        }, py::arg("x"), py::arg("alpha"), py::arg("y"), py::arg("x_in_storage") = false,
           "y + alpha * x with y in `storage`, x in fp32 (the [yolo] delta) or, with x_in_storage, in `storage` too")
        .def("unscale_check", [](Ops& o, const FloatArray& grad, float factor, float found) {
            Tensor g = o.in(grad), f = o.in(FloatArray(std::vector<py::ssize_t>{1}, &found));
            o.be->unscale_check(g, factor, f);
            return py::make_tuple(to_numpy(g), to_numpy(f).attr("ravel")());
        }, py::arg("grad"), py::arg("factor"), py::arg("found") = 0.0f,
           "returns (grad * factor, [found]): found starts at the given value and becomes 1 if a result is not finite")
        .def("sgd_update", [](Ops& o, const FloatArray& w, const FloatArray& grad, const FloatArray& m, float lr,
                              float momentum, float decay, int batch, bool skip) {
            check_min("Ops.sgd_update", "batch", batch, 1);
            check_size("Ops.sgd_update", "grad", grad.size(), w.size());
            check_size("Ops.sgd_update", "m", m.size(), w.size());
            Tensor tw = o.in(w), tg = o.in(grad), tm = o.in(m), flag = o.skip_flag(skip);
            o.be->sgd_update(tw, tg, tm, lr, momentum, decay, batch, &flag);
            return py::make_tuple(to_numpy(tw), to_numpy(tg), to_numpy(tm));
        }, py::arg("w"), py::arg("grad"), py::arg("m"), py::arg("lr"), py::arg("momentum"), py::arg("decay"),
           py::arg("batch"), py::arg("skip") = false,
           "returns (w, grad, m) after one step; skip: the step's overflow flag is set (only grad is zeroed)")
        .def("adam_update", [](Ops& o, const FloatArray& w, const FloatArray& grad, const FloatArray& m, const FloatArray& v,
                               float lr, float b1, float b2, float eps, float decay, int batch, int t, bool skip) {
            check_min("Ops.adam_update", "batch", batch, 1);
            check_min("Ops.adam_update", "t", t, 1);
            check_size("Ops.adam_update", "grad", grad.size(), w.size());
            check_size("Ops.adam_update", "m", m.size(), w.size());
            check_size("Ops.adam_update", "v", v.size(), w.size());
            Tensor tw = o.in(w), tg = o.in(grad), tm = o.in(m), tv = o.in(v), flag = o.skip_flag(skip);
            o.be->adam_update(tw, tg, tm, tv, lr, b1, b2, eps, decay, batch, t, &flag);
            return py::make_tuple(to_numpy(tw), to_numpy(tg), to_numpy(tm), to_numpy(tv));
        }, py::arg("w"), py::arg("grad"), py::arg("m"), py::arg("v"), py::arg("lr"), py::arg("b1"), py::arg("b2"),
           py::arg("eps"), py::arg("decay"), py::arg("batch"), py::arg("t"), py::arg("skip") = false,
           "returns (w, grad, m, v) after one step; skip as sgd_update's")
        .def("fill", [](Ops& o, std::vector<int> shape, float value) {
            Tensor y = o.act_out(shape_arg("Ops.fill", "shape", shape));
            o.be->fill(y, value);
            return to_numpy(y);
        })
        .def("batchnorm_fold", [](Ops& o, const FloatArray& scales, const FloatArray& biases, const FloatArray& mean,
                                  const FloatArray& var, float eps) {
            check_min("Ops.batchnorm_fold", "scales' size", scales.size(), 1);
            check_size("Ops.batchnorm_fold", "biases", biases.size(), scales.size());
            check_size("Ops.batchnorm_fold", "mean", mean.size(), scales.size());
            check_size("Ops.batchnorm_fold", "var", var.size(), scales.size());
            Tensor k = o.out(Shape{1, (int)scales.size(), 1, 1}), b = o.out(k.shape());
            o.be->batchnorm_fold(o.in(scales), o.in(biases), o.in(mean), o.in(var), eps, k, b);
            return py::make_tuple(to_numpy(k).attr("ravel")(), to_numpy(b).attr("ravel")());
        }, "returns (scale, shift)")
        .def("rolling_update", [](Ops& o, const FloatArray& rolling, const FloatArray& value, float keep) {
            check_size("Ops.rolling_update", "value", value.size(), rolling.size());
            Tensor r = o.in(rolling);
            o.be->rolling_update(r, o.in(value), keep);
            return to_numpy(r);
        })
        .def("dropout_mask", [](Ops& o, std::vector<int> shape, float probability, uint64_t seed) {
            Tensor m = o.out(shape_arg("Ops.dropout_mask", "shape", shape));
            o.be->dropout_mask(m, probability, seed);
            return to_numpy(m);
        })
        .def("yolo_activate", [](Ops& o, const FloatArray& x, int anchors, int classes, bool new_coords, float scale_x_y) {
            check_min("Ops.yolo_activate", "anchors", anchors, 1);
            check_min("Ops.yolo_activate", "classes", classes, 0);
            Shape xs = nchw("Ops.yolo_activate", "x", x);
            if ((int64_t)anchors * (5 + (int64_t)classes) != xs.c)
                bad_arg("Ops.yolo_activate", "x", "of Nx" + std::to_string((int64_t)anchors * (5 + (int64_t)classes)) +
                        "xHxW (anchors * (5 + classes) channels)", xs.str());
            Tensor tx = o.act(x), y = o.out(tx.shape());  // the head's output is fp32 in every precision
            o.be->yolo_activate(tx, YoloGeom{anchors, classes, new_coords, scale_x_y}, y);
            return to_numpy(y);
        });
}
