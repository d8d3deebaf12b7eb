#include "metal_device.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "errors.h"
#include "metal_fast_paths.h"
#include "metal_plan.h"

namespace dn {

namespace {

// DeviceMemory is only forward-declared (gpu/device.h) and every device is linked into one library:
// an allocation here *is* its MetalBuffer handle, cast to and from the opaque type (as OpenCL's cl_mem).
MetalBuffer* mtl(const DeviceMemory* m) { return reinterpret_cast<MetalBuffer*>(const_cast<DeviceMemory*>(m)); }
DeviceMemory* mem(MetalBuffer* b) { return reinterpret_cast<DeviceMemory*>(b); }

const char* path_title(MpsPath p) {
    switch (p) {
        case MpsPath::gemm: return "GEMM";
        case MpsPath::conv2d: return "convolution";
        case MpsPath::conv2d_backward: return "convolution backward";
        case MpsPath::pool: return "pooling";
        case MpsPath::pool_backward: return "pooling backward";
        case MpsPath::batchnorm: return "batchnorm";
        case MpsPath::batchnorm_backward: return "batchnorm backward";
        default: return "?";
    }
}

class MetalDevice final : public Device {
public:
    MetalDevice(std::unique_ptr<MetalApi> api, const std::string& msl, const MpsPathChoice& paths,
                std::string judging, std::shared_ptr<std::vector<std::string>> notes)
        : api_(std::move(api)),
          paths_(paths),
          judged_(std::move(judging)),
          judging_(!judged_.empty()),
          notes_(notes ? notes : std::make_shared<std::vector<std::string>>()) {
        info_ = api_->describe();
        std::string error;
        if (!api_->compile(msl, &error))
            throw DarknetError("metal (" + info_.name + "): the kernel text did not compile as MSL: " + error +
                               " (darknet_py.metal_source() shows the text)");
        if (!paths_.note.empty()) note(paths_.note);
    }

    ~MetalDevice() override {
        std::string ignored;
        api_->wait(&ignored);
        for (auto& s : scratch_)
            if (s.buffer) api_->release(s.buffer);
    }

    const DeviceInfo& info() const override { return info_; }

    std::string judged_fast_paths() const override { return judged_; }
    std::map<std::string, int> fast_path_declines() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        std::map<std::string, int> out;
        for (int i = 0; i < kMpsPathCount; ++i)
            if (declines_[i]) out[mps_path_name((MpsPath)i)] = declines_[i];
        return out;
    }

    std::map<std::string, int> fast_path_failures() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        std::map<std::string, int> out;
        for (int i = 0; i < kMpsPathCount; ++i)
            if (failures_[i]) out[mps_path_name((MpsPath)i)] = failures_[i];
        return out;
    }

    DeviceMemory* alloc(size_t bytes) override {
        MetalBuffer* b = api_->alloc(bytes ? bytes : 4);
        if (!b)
            throw DarknetError("metal (" + info_.name + "): out of GPU memory allocating " +
                               std::to_string(bytes >> 20) + " MB; use a smaller batch (or more subdivisions)");
        return mem(b);
    }
    void free(DeviceMemory* m) override {
        if (m) api_->release(mtl(m));
    }

    void upload(DeviceMemory* dst, size_t offset, const void* src, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        bytes_uploaded += bytes;
        if (bytes == 0) return;
        if (!metal_plan::upload_in_place(api_->busy())) {
            if (metal_plan::blit_fits(0, offset, bytes)) {
                api_->upload_staged(mtl(dst), offset, src, bytes);
                encoded();
                return;
            }
            wait();  // a size a blit cannot take: in place once the queued work is done
        }
        std::memcpy((char*)api_->contents(mtl(dst)) + offset, src, bytes);
    }
    void download(const DeviceMemory* src, size_t offset, void* dst, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        wait();
        bytes_downloaded += bytes;
        ++blocking_downloads;
        std::memcpy(dst, (const char*)api_->contents(mtl(src)) + offset, bytes);
    }
    void copy(const DeviceMemory* src, size_t src_offset, DeviceMemory* dst, size_t dst_offset, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (bytes == 0) return;
        if (!metal_plan::blit_fits(src_offset, dst_offset, bytes)) {  // on the host, in order with the queue
            wait();
            std::memmove((char*)api_->contents(mtl(dst)) + dst_offset,
                         (const char*)api_->contents(mtl(src)) + src_offset, bytes);
            return;
        }
        api_->copy(mtl(src), src_offset, mtl(dst), dst_offset, bytes);
        encoded();
    }

    void launch(const char* name, LaunchDims dims, const std::vector<KernelArg>& args) override {
        if (dims.groups == 0) return;
        std::lock_guard<std::mutex> lock(mutex_);
        metal_plan::check_launch(name, dims, limit(name));
        api_->dispatch(name, dims.groups, dims.group, metal_plan::bind_arguments(name, args));
        encoded();
    }
    uint32_t max_group_size(const char* name) override {
        std::lock_guard<std::mutex> lock(mutex_);
        return limit(name);
    }
    void synchronize() override {
        std::lock_guard<std::mutex> lock(mutex_);
        wait();
    }

    // ---- MPS fast paths ----
    bool gemm(bool ta, bool tb, int M, int N, int K, float alpha, const DeviceMemory* A, size_t a_offset, int lda,
              const DeviceMemory* B, size_t b_offset, int ldb, float beta, DeviceMemory* C, size_t c_offset,
              int ldc) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!paths_.on(MpsPath::gemm)) return false;
        MpsGemmPlan plan;
        std::string why;
        if (!metal_plan::plan_gemm(ta, tb, M, N, K, alpha, mtl(A), a_offset, lda, api_->length(mtl(A)), mtl(B),
                                   b_offset, ldb, api_->length(mtl(B)), beta, mtl(C), c_offset, ldc,
                                   api_->length(mtl(C)), &plan, &why))
            return declined(MpsPath::gemm, why);
        // with beta != 0 C is also an input, not intact after a failure on the GPU
        return run_mps(MpsPath::gemm, beta == 0, [&](std::string* e) { return api_->mps_gemm(plan, e); });
    }

    bool conv2d(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* w, DeviceMemory* y) override {
        if (p.dtype != DType::f32 || p.nhwc) return false;  // MPS in half, NHWC: not yet (src-lib/gpu/PRECISION.md)
        return conv(MpsPath::conv2d, GraphOp::conv2d, p, {mtl(x), mtl(w), mtl(y)}, nullptr, 0);
    }
    bool conv2d_backward_data(const ConvParams& p, const DeviceMemory* dy, const DeviceMemory* w,
                              DeviceMemory* dx) override {
        if (p.dtype != DType::f32 || p.nhwc) return false;  // MPS in half, NHWC: not yet, our kernels run
        return conv(MpsPath::conv2d_backward, GraphOp::conv2d_backward_data, p, {mtl(dy), mtl(w), mtl(dx)}, mtl(dx),
                    p.x.size());
    }
    bool conv2d_backward_weights(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* dy,
                                 DeviceMemory* dw) override {
        if (p.dtype != DType::f32 || p.nhwc) return false;  // (and a half dw would be overwritten, device.h)
        size_t w_size = (size_t)p.y.c * (p.x.c / (p.groups ? p.groups : 1)) * p.kh * p.kw;
        return conv(MpsPath::conv2d_backward, GraphOp::conv2d_backward_weights, p, {mtl(x), mtl(dy), mtl(dw)},
                    mtl(dw), w_size);
    }
    bool pool(const PoolParams& p, const DeviceMemory* x, DeviceMemory* y) override {
        if (p.dtype != DType::f32) return false;
        return pooling(MpsPath::pool, GraphOp::pool, p, {mtl(x), mtl(y)}, nullptr);
    }
    bool pool_backward(const PoolParams& p, const DeviceMemory* x, const DeviceMemory* dy, DeviceMemory* dx) override {
        if (p.dtype != DType::f32) return false;  // MPSGraph's pooling here is fp32 (half: the kernels)
        return pooling(MpsPath::pool_backward, GraphOp::pool_backward, p, {mtl(x), mtl(dy), mtl(dx)}, mtl(dx));
    }
    bool batchnorm_train(const NchwShape& s, float eps, DeviceMemory* y, DeviceMemory* mean, DeviceMemory* var,
                         DeviceMemory* x_norm, const DeviceMemory* scale, const DeviceMemory* bias) override {
        std::lock_guard<std::mutex> lock(mutex_);
        GraphNormPlan plan;
        if (!ready(MpsPath::batchnorm, s, eps, &plan)) return false;
        MetalBuffer* y_out = scratch(0, s.size());
        if (!run_mps(MpsPath::batchnorm, true, [&](std::string* e) {
                return api_->graph_norm(GraphOp::batchnorm_train, plan,
                                        {mtl(y), mtl(scale), mtl(bias), y_out, mtl(mean), mtl(var), mtl(x_norm)}, e);
            }))
            return false;
        copy_back(y_out, mtl(y), s.size());
        return true;
    }
    bool batchnorm_backward(const NchwShape& s, float eps, DeviceMemory* dy, const DeviceMemory* x_norm,
                            const DeviceMemory* scale, const DeviceMemory* var, DeviceMemory* dscale,
                            DeviceMemory* dbias) override {
        std::lock_guard<std::mutex> lock(mutex_);
        GraphNormPlan plan;
        if (!ready(MpsPath::batchnorm_backward, s, eps, &plan)) return false;
        MetalBuffer *dy_out = scratch(0, s.size()), *ds = scratch(1, s.c), *db = scratch(2, s.c);
        if (!run_mps(MpsPath::batchnorm_backward, true, [&](std::string* e) {
                return api_->graph_norm(GraphOp::batchnorm_backward, plan,
                                        {mtl(dy), mtl(x_norm), mtl(scale), mtl(var), mtl(dscale), mtl(dbias), dy_out,
                                         ds, db},
                                        e);
            }))
            return false;
        copy_back(dy_out, mtl(dy), s.size());
        copy_back(ds, mtl(dscale), s.c);
        copy_back(db, mtl(dbias), s.c);
        return true;
    }

private:
    uint32_t limit(const char* name) {
        auto it = limits_.find(name);
        if (it != limits_.end()) return it->second;
        MetalPipelineLimits l;
        std::string error;
        if (!api_->pipeline(name, &l, &error))
            throw DarknetError("metal (" + info_.name + "): no pipeline for kernel " + name + ": " + error);
        return limits_[name] = metal_plan::group_limit(l);
    }

    // One more command in the open command buffer; commits it after about a layer's worth.
    void encoded() {
        if (metal_plan::should_commit(++commands_)) {
            api_->commit();
            commands_ = 0;
        }
    }
    // Waits for all queued work; false with Metal's error when a command buffer failed (the MPS calls
    // since the last good wait are then still in pending_).
    bool sync(std::string* error) {
        commands_ = 0;
        if (!api_->wait(error)) return false;
        pending_.fill(0);
        return true;
    }
    // A failure found here is asynchronous: which call broke the failed buffers is not known, their
    // results are lost and later work may have used or overwritten the data, so no op can run again
    // in its place. Every MPS path with work since the last good wait is switched off and counted, and
    // the call that waited (a download, a synchronize) fails with the failure and that work named.
    void wait() {
        std::string error;
        if (sync(&error)) return;
        std::string lost;
        for (int i = 0; i < kMpsPathCount; ++i) {
            if (!pending_[i]) continue;
            lost += (lost.empty() ? "" : ", ") + std::string(path_title((MpsPath)i)) + " x" +
                    std::to_string(pending_[i]);
            switch_off((MpsPath)i, pending_[i]);
        }
        pending_.fill(0);
        throw DarknetError("metal (" + info_.name + "): a command buffer failed: " + error +
                           (lost.empty() ? std::string()
                                         : "; it held MPS work whose results are lost (" + lost + "): those paths "
                                           "are switched off and our kernels run them from now on; run this again"));
    }

    // A scratch buffer of at least n floats (the fast paths' outputs, which must not alias their inputs).
    struct Scratch {
        MetalBuffer* buffer = nullptr;
        size_t floats = 0;
    };
    MetalBuffer* scratch(size_t slot, size_t n) {
        if (scratch_.size() <= slot) scratch_.resize(slot + 1);
        Scratch& s = scratch_[slot];
        if (s.floats < n) {
            if (s.buffer) api_->release(s.buffer);  // queued work keeps its own reference (the .mm retains)
            s.buffer = mtl(alloc(n * sizeof(float)));
            s.floats = n;
        }
        return s.buffer;
    }
    void copy_back(MetalBuffer* from, MetalBuffer* to, size_t floats) {
        api_->copy(from, 0, to, 0, floats * sizeof(float));
        encoded();
    }

    bool conv(MpsPath path, GraphOp op, const ConvParams& p, std::vector<MetalBuffer*> buffers, MetalBuffer* acc,
              size_t acc_floats) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!paths_.on(path)) return false;
        GraphConvPlan plan;
        std::string why;
        if (!metal_plan::plan_conv(p, &plan, &why)) return declined(path, why);
        if (acc) buffers.push_back(scratch(0, acc_floats));
        if (!run_mps(path, true, [&](std::string* e) { return api_->graph_conv(op, plan, buffers, e); })) return false;
        if (acc) copy_back(buffers.back(), acc, acc_floats);
        return true;
    }
    bool pooling(MpsPath path, GraphOp op, const PoolParams& p, std::vector<MetalBuffer*> buffers, MetalBuffer* acc) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!paths_.on(path)) return false;
        GraphPoolPlan plan;
        std::string why;
        if (!metal_plan::plan_pool(p, &plan, &why)) return declined(path, why);
        if (acc) buffers.push_back(scratch(0, p.x.size()));
        if (!run_mps(path, true, [&](std::string* e) { return api_->graph_pool(op, plan, buffers, e); })) return false;
        if (acc) copy_back(buffers.back(), acc, p.x.size());
        return true;
    }
    bool ready(MpsPath path, const NchwShape& s, float eps, GraphNormPlan* plan) {
        if (!paths_.on(path)) return false;
        std::string why;
        return metal_plan::plan_norm(s, eps, plan, &why) || declined(path, why);
    }

    // MPS cannot take this case: our kernels run it (counted; said once per path).
    bool declined(MpsPath p, const std::string& why) {
        if (declines_[(int)p]++ == 0) {
            note("metal: MPS " + std::string(path_title(p)) + " not used for a case it cannot take (" + why +
                 "): our kernels run it");
        }
        return false;
    }
    // One MPS call of `path`: `encode` puts it into the open command buffer, false with *why when MPS
    // refused or raised (found at once, so the op's data is intact). A path is proven by its first call
    // whose data stays intact if it fails (`intact`: it writes none of its inputs), waited on alone: a
    // path that fails on this GPU is then found while our kernels can still run the op in its place.
    // Until then, and after, a failure on the GPU is found at a later wait (wait()).
    bool run_mps(MpsPath path, bool intact, const std::function<bool(std::string*)>& encode) {
        int i = (int)path;
        bool prove = intact && !proven_[i];
        if (prove) wait();  // the command buffer then holds this call alone
        std::string why;
        if (!encode(&why)) return failed(path, why);
        encoded();
        if (!prove) return ++pending_[i], true;
        if (!sync(&why)) return failed(path, "its command buffer failed: " + why);
        return proven_[i] = true;
    }
    // MPS failed and the op's data is intact: our kernels run this op and this path from now on.
    bool failed(MpsPath p, const std::string& why) {
        switch_off(p, 1);
        std::string line =
            "metal: MPS " + std::string(path_title(p)) + " failed (" + why + "): our kernels run it from now on";
        if (judging_) throw DarknetError(line);
        note(line);
        return false;
    }
    void switch_off(MpsPath p, int calls) {
        paths_.enabled[(int)p] = false;
        failures_[(int)p] += calls;
    }
    void note(const std::string& line) {
        notes_->push_back(line);
        std::fprintf(stderr, "darknet_py: %s\n", line.c_str());
    }

    std::unique_ptr<MetalApi> api_;
    MpsPathChoice paths_;
    std::string judged_;  // DARKNET_PY_SELFTEST's value in judging mode, else empty
    bool judging_;  // the selftest is judging the MPS paths: a failure fails the op
    std::shared_ptr<std::vector<std::string>> notes_;
    DeviceInfo info_;
    mutable std::mutex mutex_;
    std::map<std::string, uint32_t> limits_;
    std::vector<Scratch> scratch_;
    std::array<int, kMpsPathCount> declines_{};  // cases an MPS path declined (our kernels ran them)
    bool proven_[kMpsPathCount] = {};
    std::array<int, kMpsPathCount> pending_{};   // MPS calls encoded since the last good wait
    std::array<int, kMpsPathCount> failures_{};  // MPS calls that failed, counted per path
    int commands_ = 0;
};

}  // namespace

std::shared_ptr<Device> make_metal_device(std::unique_ptr<MetalApi> api, const std::string& msl,
                                          const char* selftest_env, const char* mps_env,
                                          std::shared_ptr<std::vector<std::string>> notes) {
    std::string judging = judging_mps_paths(selftest_env) ? selftest_env : "";  // as choose_mps_paths reads it
    std::string gpu = api->describe().name;
    return std::make_shared<MetalDevice>(std::move(api), msl, choose_mps_paths(selftest_env, mps_env, gpu), judging,
                                         std::move(notes));
}

#ifdef DARKNET_PY_METAL
std::shared_ptr<Device> open_metal_device(const std::string& msl) {
    std::string why;
    auto api = open_system_metal_api(&why);
    if (!api) throw DarknetError("metal: " + why);
    return make_metal_device(std::move(api), msl, std::getenv("DARKNET_PY_SELFTEST"), std::getenv("DARKNET_PY_MPS"));
}
#endif

}  // namespace dn
