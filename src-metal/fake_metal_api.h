// FakeMetalApi: MetalApi on host memory, for the Linux unit tests of MetalDevice and its decisions.
// It records every call as one line of text (the tests assert on them), keeps buffers in host
// memory, and runs an MPS GEMM on the host exactly as its descriptor says (row-major matrices at a
// byte offset with rowBytes between rows): wrong descriptor values give wrong numbers. Compile errors,
// pipeline limits and MPS failures are set by the test. Blits are checked as Metal on macOS checks
// them: a size or offset not a multiple of 4, or 0 bytes, is an error (DarknetError).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metal_api.h"

namespace dn {

// MPS failures a test plants, each reported as metal_objc.mm reports it. Names: "gemm" or a graph op
// (graph_op_name); each entry serves one call, and the test may add entries while the device runs.
// Failures that end the process (abort, hang, crash) come from the environment instead
// (DARKNET_PY_FAKE_METAL_FAULTS, fake_metal_api.cpp), so that a child process inherits them.
struct FakeMetalFaults {
    std::vector<std::string> raising;          // the call raises an Objective-C exception: it fails at once
    std::vector<std::string> failing_buffers;  // its command buffer fails on the GPU: the next wait fails
    // MPSGraph committed a segment of its command buffer (commitAndContinue) that then failed: the last
    // segment completes, the next wait fails with the earlier one's error
    std::vector<std::string> failing_segments;
};

struct FakeMetalOptions {
    std::string compile_error;                          // non-empty: compile() fails with it
    std::map<std::string, MetalPipelineLimits> limits;  // per kernel; others get {1024, 32}
    std::shared_ptr<FakeMetalFaults> faults = std::make_shared<FakeMetalFaults>();
    bool busy = false;                                  // what busy() answers
};

class FakeMetalApi final : public MetalApi {
public:
    explicit FakeMetalApi(FakeMetalOptions o, std::shared_ptr<std::vector<std::string>> log)
        : o_(std::move(o)), log_(std::move(log)) {}
    ~FakeMetalApi() override;

    DeviceInfo describe() override;
    bool compile(const std::string& msl, std::string* error) override;
    bool pipeline(const std::string& name, MetalPipelineLimits* limits, std::string* error) override;
    MetalBuffer* alloc(size_t bytes) override;
    void release(MetalBuffer* b) override;
    size_t length(const MetalBuffer* b) override;
    void* contents(MetalBuffer* b) override;
    void dispatch(const std::string& pipeline, uint32_t groups, uint32_t group,
                  const std::vector<MetalBinding>& bindings) override;
    void copy(const MetalBuffer* src, size_t src_offset, MetalBuffer* dst, size_t dst_offset, size_t bytes) override;
    void upload_staged(MetalBuffer* dst, size_t offset, const void* src, size_t bytes) override;
    bool mps_gemm(const MpsGemmPlan& plan, std::string* error) override;
    bool graph_conv(GraphOp op, const GraphConvPlan& plan, const std::vector<MetalBuffer*>& buffers,
                    std::string* error) override;
    bool graph_pool(GraphOp op, const GraphPoolPlan& plan, const std::vector<MetalBuffer*>& buffers,
                    std::string* error) override;
    bool graph_norm(GraphOp op, const GraphNormPlan& plan, const std::vector<MetalBuffer*>& buffers,
                    std::string* error) override;
    void commit() override;
    bool wait(std::string* error) override;
    bool busy() override { return o_.busy; }

private:
    int id(const MetalBuffer* b) const;
    bool mps(const std::string& what, std::string* error);
    FakeMetalOptions o_;
    std::shared_ptr<std::vector<std::string>> log_;
    std::map<const MetalBuffer*, std::pair<int, std::vector<char>>> buffers_;  // id, bytes
    int next_id_ = 1;
    bool buffer_failed_ = false;   // the work since the last wait holds a call of failing_buffers
    bool segment_failed_ = false;  // ... or of failing_segments
};

}  // namespace dn
