#include "fake_metal_api.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "errors.h"

namespace dn {

namespace {
std::string n(size_t v) { return std::to_string(v); }
std::string shape(const int64_t* s) { return n(s[0]) + "x" + n(s[1]) + "x" + n(s[2]) + "x" + n(s[3]); }

// Removes one `name` from `list`; whether there was one.
bool take(std::vector<std::string>* list, const std::string& name) {
    auto it = std::find(list->begin(), list->end(), name);
    if (it == list->end()) return false;
    list->erase(it);
    return true;
}
}  // namespace

FakeMetalApi::~FakeMetalApi() {
    for (auto& kv : buffers_) delete[] reinterpret_cast<const char*>(kv.first);
}

DeviceInfo FakeMetalApi::describe() {
    DeviceInfo i;
    i.id = "metal";
    i.name = "FakeMetal";
    i.vendor = "test";
    i.driver = "fake";
    i.memory_bytes = 1ull << 30;
    return i;
}

bool FakeMetalApi::compile(const std::string& msl, std::string* error) {
    log_->push_back("compile " + n(msl.size()) + " chars");
    if (o_.compile_error.empty()) return true;
    *error = o_.compile_error;
    return false;
}

bool FakeMetalApi::pipeline(const std::string& name, MetalPipelineLimits* limits, std::string* error) {
    log_->push_back("pipeline " + name);
    auto it = o_.limits.find(name);
    *limits = it != o_.limits.end() ? it->second : MetalPipelineLimits{1024, 32};
    return true;
}

MetalBuffer* FakeMetalApi::alloc(size_t bytes) {
    // a distinct address per buffer (the handle), its bytes kept alongside
    MetalBuffer* b = reinterpret_cast<MetalBuffer*>(new char[1]);
    buffers_[b] = {next_id_++, std::vector<char>(bytes, 0)};
    return b;
}

void FakeMetalApi::release(MetalBuffer* b) {
    auto it = buffers_.find(b);
    if (it == buffers_.end()) return;
    buffers_.erase(it);
    delete[] reinterpret_cast<char*>(b);
}

size_t FakeMetalApi::length(const MetalBuffer* b) { return buffers_.at(b).second.size(); }
void* FakeMetalApi::contents(MetalBuffer* b) { return buffers_.at(b).second.data(); }
int FakeMetalApi::id(const MetalBuffer* b) const {
    auto it = buffers_.find(b);
    return it == buffers_.end() ? 0 : it->second.first;
}

void FakeMetalApi::dispatch(const std::string& pipeline, uint32_t groups, uint32_t group,
                            const std::vector<MetalBinding>& bindings) {
    std::string line = "dispatch " + pipeline + " groups=" + n(groups) + " group=" + n(group);
    for (const MetalBinding& b : bindings)
        line += " " + n(b.index) + ":" + (b.bytes ? "bytes" + n(b.size) : "buf" + n(id(b.buffer)) + "+" + n(b.offset));
    log_->push_back(line);
}

// What Metal's validation says of a blit on macOS (copyFromBuffer: offsets and size multiples of 4).
static void check_blit(size_t src_offset, size_t dst_offset, size_t bytes) {
    if (bytes == 0 || src_offset % 4 || dst_offset % 4 || bytes % 4)
        throw DarknetError("fake metal: a blit of " + std::to_string(bytes) + " bytes at offsets " +
                           std::to_string(src_offset) + ", " + std::to_string(dst_offset) +
                           " (macOS needs multiples of 4, and something to copy)");
}

void FakeMetalApi::copy(const MetalBuffer* src, size_t src_offset, MetalBuffer* dst, size_t dst_offset, size_t bytes) {
    check_blit(src_offset, dst_offset, bytes);
    log_->push_back("copy buf" + n(id(src)) + "+" + n(src_offset) + " -> buf" + n(id(dst)) + "+" + n(dst_offset) + " " +
                    n(bytes) + " bytes");
    std::memmove((char*)contents(dst) + dst_offset, (const char*)contents(const_cast<MetalBuffer*>(src)) + src_offset,
                 bytes);
}

void FakeMetalApi::upload_staged(MetalBuffer* dst, size_t offset, const void* src, size_t bytes) {
    check_blit(0, offset, bytes);
    log_->push_back("upload_staged buf" + n(id(dst)) + "+" + n(offset) + " " + n(bytes) + " bytes");
    std::memcpy((char*)contents(dst) + offset, src, bytes);
}

// What the real MPS does where C++ cannot catch it, planted by DARKNET_PY_FAKE_METAL_FAULTS (read at
// every MPS call, so that a child process of the selftest inherits it): a comma-separated list of
// "abort:<call>" (a failed C assertion: abort()), "hang:<call>" (never returns) and "crash:<call>"
// (SIGSEGV), <call> as in FakeMetalFaults.
static void planted_process_faults(const std::string& what) {
    const char* env = std::getenv("DARKNET_PY_FAKE_METAL_FAULTS");
    if (!env) return;
    std::string list = std::string(",") + env + ",";
    auto has = [&](const char* how) { return list.find("," + std::string(how) + ":" + what + ",") != std::string::npos; };
    if (has("abort")) {
        std::fprintf(stderr, "/AppleInternal/fake/MPSNDArray.mm:850: failed assertion `[MPSNDArray initWithDevice:"
                             "descriptor:] Error: total bytes of NDArray > 2**32' (planted in %s)\n", what.c_str());
        std::fflush(stderr);
        std::abort();
    }
    if (has("crash")) std::raise(SIGSEGV);
    if (has("hang"))
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

bool FakeMetalApi::mps(const std::string& what, std::string* error) {
    planted_process_faults(what);
    if (take(&o_.faults->failing_buffers, what)) buffer_failed_ = true;
    if (take(&o_.faults->failing_segments, what)) segment_failed_ = true;
    if (!take(&o_.faults->raising, what)) return true;
    *error = "MPS " + what + " raised NSInvalidArgumentException: planted by the test";
    return false;
}

bool FakeMetalApi::mps_gemm(const MpsGemmPlan& p, std::string* error) {
    auto desc = [&](const MpsMatrixDesc& m) {
        return "buf" + n(id(m.buffer)) + "+" + n(m.offset_bytes) + " " + n(m.rows) + "x" + n(m.columns) + " rowBytes=" +
               n(m.row_bytes);
    };
    log_->push_back("mps_gemm transposeLeft=" + n(p.transpose_left) + " transposeRight=" + n(p.transpose_right) +
                    " resultRows=" + n(p.result_rows) + " resultColumns=" + n(p.result_columns) + " interiorColumns=" +
                    n(p.interior_columns) + " left=" + desc(p.left) + " right=" + desc(p.right) + " result=" +
                    desc(p.result));
    if (!mps("gemm", error)) return false;
    // MPS's meaning: element (r, c) of a matrix is the float at offset + r * rowBytes + c * 4
    auto at = [&](const MpsMatrixDesc& m, uint32_t r, uint32_t c) -> float& {
        return *(float*)((char*)contents(m.buffer) + m.offset_bytes + r * m.row_bytes + c * sizeof(float));
    };
    for (uint32_t i = 0; i < p.result_rows; ++i)
        for (uint32_t j = 0; j < p.result_columns; ++j) {
            double s = 0;
            for (uint32_t k = 0; k < p.interior_columns; ++k)
                s += (double)(p.transpose_left ? at(p.left, k, i) : at(p.left, i, k)) *
                     (p.transpose_right ? at(p.right, j, k) : at(p.right, k, j));
            float& c = at(p.result, i, j);
            c = (float)(p.alpha * s + p.beta * c);
        }
    return true;
}

bool FakeMetalApi::graph_conv(GraphOp op, const GraphConvPlan& p, const std::vector<MetalBuffer*>& buffers,
                              std::string* error) {
    std::string ids;
    for (auto* b : buffers) ids += " buf" + n(id(b));
    log_->push_back(std::string("graph ") + graph_op_name(op) + " x=" + shape(p.x) + " w=" + shape(p.w) + " y=" +
                    shape(p.y) + " stride=" + n(p.stride_x) + "," + n(p.stride_y) + " dilation=" + n(p.dilation_x) +
                    "," + n(p.dilation_y) + " groups=" + n(p.groups) + " pad=" + n(p.pad_left) + "," + n(p.pad_right) +
                    "," + n(p.pad_top) + "," + n(p.pad_bottom) + ids);
    return mps(graph_op_name(op), error);
}

bool FakeMetalApi::graph_pool(GraphOp op, const GraphPoolPlan& p, const std::vector<MetalBuffer*>& buffers,
                              std::string* error) {
    std::string ids;
    for (auto* b : buffers) ids += " buf" + n(id(b));
    log_->push_back(std::string("graph ") + graph_op_name(op) + (p.max ? " max" : " avg") + " x=" + shape(p.x) +
                    " y=" + shape(p.y) + " kernel=" + n(p.kernel_w) + "x" + n(p.kernel_h) + " stride=" +
                    n(p.stride_x) + "," + n(p.stride_y) + " pad=" + n(p.pad_left) + "," + n(p.pad_right) + "," +
                    n(p.pad_top) + "," + n(p.pad_bottom) + " zero_pad=" + n(p.include_zero_pad) + ids);
    return mps(graph_op_name(op), error);
}

bool FakeMetalApi::graph_norm(GraphOp op, const GraphNormPlan& p, const std::vector<MetalBuffer*>& buffers,
                              std::string* error) {
    std::string ids;
    for (auto* b : buffers) ids += " buf" + n(id(b));
    log_->push_back(std::string("graph ") + graph_op_name(op) + " shape=" + shape(p.shape) + " count=" +
                    std::to_string(p.count) + " unbiased=" + std::to_string(p.unbiased) + ids);
    return mps(graph_op_name(op), error);
}

void FakeMetalApi::commit() { log_->push_back("commit"); }

bool FakeMetalApi::wait(std::string* error) {
    log_->push_back("wait");
    bool buffer = buffer_failed_, segment = segment_failed_;
    buffer_failed_ = segment_failed_ = false;
    if (!buffer && !segment) return true;
    // as metal_objc.mm's wait words a failed segment MPSGraph committed before the last one
    *error = segment ? "MPSGraph reported: an earlier segment failed: Internal Error (planted by the test)"
                     : "Execution of the command buffer was aborted due to an error during execution (planted by the test)";
    return false;
}

}  // namespace dn
