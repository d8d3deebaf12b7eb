// The one Objective-C++ file of the Metal device: MetalApi (metal_api.h) on Metal and MPS. It only
// translates: every decision (argument indices, group sizes, descriptor values, which path runs,
// fallbacks) arrives as plain values from metal_device.cpp / metal_plan.cpp, which are tested on Linux.
//
// Built with ARC. On Linux, CI compiles this file with -fsyntax-only against declarations of exactly
// the Apple API used here (apple_api_decls/, DARKNET_PY_APPLE_API_DECLS), so a misspelt selector
// or a wrong argument type fails there too; on a Mac the real frameworks are used.
#ifdef DARKNET_PY_APPLE_API_DECLS
#include "apple_api_decls/Foundation.h"
#include "apple_api_decls/Metal.h"
#include "apple_api_decls/MPS.h"
#else
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>
#endif

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "errors.h"
#include "metal_device.h"

namespace dn {

namespace {

// A MetalBuffer* is a +1 reference to an id<MTLBuffer> (released by MetalApi::release).
id<MTLBuffer> mtl(const MetalBuffer* b) { return (__bridge id<MTLBuffer>)(void*)b; }

std::string str(NSString* s) { return s ? std::string([s UTF8String]) : std::string(); }
std::string message(NSError* e) { return e ? str([e localizedDescription]) : std::string("no error message"); }

// Runs body (which returns bool) with an Objective-C exception turned into false and "<what> raised
// <name>: <reason>" in *error: MPS and MPSGraph raise NSException for descriptors and shapes they
// reject, Metal for misuse, and none may cross MetalApi. (ARC releases what the unwound frames held:
// -fobjc-arc-exceptions is the default in Objective-C++.)
template <class Body>
bool guarded(const std::string& what, std::string* error, Body&& body) {
    @try {
        return body();
    } @catch (NSException* e) {
        *error = what + " raised " + str([e name]) + ": " + str([e reason]);
    } @catch (id) {
        *error = what + " raised an Objective-C exception that is not an NSException";
    }
    return false;
}
// The same for the encoders that return nothing: the exception becomes DarknetError (metal_api.h).
template <class Body>
void guarded(const std::string& what, Body&& body) {
    std::string error;
    bool ok = guarded(what, &error, [&] {
        body();
        return true;
    });
    if (!ok) throw DarknetError("metal: " + error);
}

MPSShape* shape4(const int64_t* d) {
    return @[ @((long long)d[0]), @((long long)d[1]), @((long long)d[2]), @((long long)d[3]) ];
}

// The errors MPSGraph's completion handlers report (they run on Metal's threads), for the next wait.
struct GraphErrors {
    std::mutex mutex;
    std::vector<std::string> list;
};

// One compiled MPSGraph: its placeholders and results, in the buffer order of metal_api.h's GraphOp.
struct Graph {
    MPSGraph* graph = nil;
    std::vector<MPSGraphTensor*> inputs, outputs;
    std::vector<MPSShape*> input_shapes, output_shapes;
};

class SystemMetalApi final : public MetalApi {
public:
    explicit SystemMetalApi(id<MTLDevice> device)
        : device_(device), queue_([device newCommandQueue]), mps_ok_(MPSSupportsMTLDevice(device)) {}
    ~SystemMetalApi() override {
        std::string ignored;
        wait(&ignored);
    }

    DeviceInfo describe() override {
        @autoreleasepool {
            return description();
        }
    }
    DeviceInfo description() {
        DeviceInfo i;
        i.id = "metal";
        i.name = str([device_ name]);
        i.vendor = "Apple";
        i.driver = "Metal";
        i.memory_bytes = [device_ recommendedMaxWorkingSetSize];
        i.is_gpu = true;
        return i;
    }

    bool compile(const std::string& msl, std::string* error) override {
        @autoreleasepool {
            return guarded("newLibraryWithSource", error, [&] {
                MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
                options.fastMathEnabled = NO;  // a*b+c and the math functions as in the C++ backends
                NSError* err = nil;
                library_ = [device_ newLibraryWithSource:[NSString stringWithUTF8String:msl.c_str()]
                                                 options:options
                                                   error:&err];
                if (library_) return true;  // (err may hold warnings then)
                *error = message(err);
                return false;
            });
        }
    }

    bool pipeline(const std::string& name, MetalPipelineLimits* limits, std::string* error) override {
        @autoreleasepool {
            return guarded("the pipeline of " + name, error, [&] {
                id<MTLComputePipelineState> p = pipelines_[name];
                if (!p) {
                    id<MTLFunction> f = [library_ newFunctionWithName:[NSString stringWithUTF8String:name.c_str()]];
                    if (!f) return *error = "the MSL has no kernel named " + name, false;
                    NSError* err = nil;
                    p = [device_ newComputePipelineStateWithFunction:f error:&err];
                    if (!p) return *error = message(err), false;
                    pipelines_[name] = p;
                }
                limits->max_threads = (uint32_t)[p maxTotalThreadsPerThreadgroup];
                limits->execution_width = (uint32_t)[p threadExecutionWidth];
                return true;
            });
        }
    }

    MetalBuffer* alloc(size_t bytes) override {
        @autoreleasepool {
            id<MTLBuffer> b = nil;
            std::string ignored;  // MetalDevice reports any refusal as out of memory
            guarded("newBufferWithLength", &ignored, [&] {
                b = [device_ newBufferWithLength:bytes options:MTLResourceStorageModeShared];
                return true;
            });
            return b ? (MetalBuffer*)(__bridge_retained void*)b : nullptr;
        }
    }
    void release(MetalBuffer* b) override {
        id<MTLBuffer> owned = (__bridge_transfer id<MTLBuffer>)(void*)b;  // dropped at the end of this scope;
        (void)owned;                                                      // queued work keeps its own reference
    }
    size_t length(const MetalBuffer* b) override { return [mtl(b) length]; }
    void* contents(MetalBuffer* b) override { return [mtl(b) contents]; }

    void dispatch(const std::string& name, uint32_t groups, uint32_t group,
                  const std::vector<MetalBinding>& bindings) override {
        @autoreleasepool {
            guarded("kernel " + name, [&] {
                id<MTLComputeCommandEncoder> enc = compute_encoder();
                [enc setComputePipelineState:pipelines_[name]];
                for (const MetalBinding& b : bindings) {
                    if (b.bytes) [enc setBytes:b.bytes length:b.size atIndex:b.index];
                    else [enc setBuffer:(b.buffer ? mtl(b.buffer) : nil) offset:b.offset atIndex:b.index];
                }
                [enc dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
            });
        }
    }

    void copy(const MetalBuffer* src, size_t src_offset, MetalBuffer* dst, size_t dst_offset, size_t bytes) override {
        @autoreleasepool {
            guarded("a copy", [&] { blit(mtl(src), src_offset, mtl(dst), dst_offset, bytes); });
        }
    }

    void upload_staged(MetalBuffer* dst, size_t offset, const void* src, size_t bytes) override {
        @autoreleasepool {
            guarded("a staged upload", [&] {
                id<MTLBuffer> staging = [device_ newBufferWithBytes:src
                                                             length:bytes
                                                            options:MTLResourceStorageModeShared];
                blit(staging, 0, mtl(dst), offset, bytes);
            });
        }
    }

    bool mps_gemm(const MpsGemmPlan& p, std::string* error) override {
        @autoreleasepool {
            return guarded("MPSMatrixMultiplication", error, [&] {
                if (!mps_ok_) return *error = "MPS does not support this device", false;
                end_compute();
                char key_text[160];  // alpha and beta exactly (%a): a kernel is made for one pair
                std::snprintf(key_text, sizeof key_text, "%d%d %u %u %u %a %a", (int)p.transpose_left,
                              (int)p.transpose_right, p.result_rows, p.result_columns, p.interior_columns, p.alpha,
                              p.beta);
                std::string key = key_text;
                MPSMatrixMultiplication* k = gemms_[key];
                if (!k) {
                    k = [[MPSMatrixMultiplication alloc] initWithDevice:device_
                                                          transposeLeft:p.transpose_left
                                                         transposeRight:p.transpose_right
                                                             resultRows:p.result_rows
                                                          resultColumns:p.result_columns
                                                        interiorColumns:p.interior_columns
                                                                  alpha:p.alpha
                                                                   beta:p.beta];
                    gemms_[key] = k;
                }
                [k encodeToCommandBuffer:command_buffer()
                              leftMatrix:matrix(p.left)
                             rightMatrix:matrix(p.right)
                            resultMatrix:matrix(p.result)];
                return true;
            });
        }
    }

    bool graph_conv(GraphOp op, const GraphConvPlan& p, const std::vector<MetalBuffer*>& buffers,
                    std::string* error) override {
        return graph(op, p, buffers, error, &SystemMetalApi::build_conv);
    }
    bool graph_pool(GraphOp op, const GraphPoolPlan& p, const std::vector<MetalBuffer*>& buffers,
                    std::string* error) override {
        return graph(op, p, buffers, error, &SystemMetalApi::build_pool);
    }
    bool graph_norm(GraphOp op, const GraphNormPlan& p, const std::vector<MetalBuffer*>& buffers,
                    std::string* error) override {
        return graph(op, p, buffers, error, &SystemMetalApi::build_norm);
    }

    void commit() override {
        @autoreleasepool {
            if (!open_) return;
            MPSCommandBuffer* cb = open_;
            open_ = nil;  // one that cannot be committed is dropped: waiting on it would never end
            std::string error;
            bool ok = guarded("commit", &error, [&] {
                end_compute();
                [cb commit];
                return true;
            });
            if (ok) committed_.push_back([cb rootCommandBuffer]);
            else if (commit_error_.empty()) commit_error_ = error;  // its work is lost, as a failed buffer's
        }
    }

    // Every segment committed since the last wait: those MPSGraph committed with commitAndContinue, then
    // ours (the root command buffer of each, as MPSCommandBuffer's header says to wait on), and the
    // errors of MPSGraph's completion handlers; false with the first failure and how many there were.
    bool wait(std::string* error) override {
        @autoreleasepool {
            commit();
            std::vector<std::string> failures;
            if (!commit_error_.empty()) failures.push_back(commit_error_);
            commit_error_.clear();
            for (id<MTLCommandBuffer> cb : committed_) {  // one queue: they finish in order
                std::string e;
                bool ok = guarded("waitUntilCompleted", &e, [&] {
                    [cb waitUntilCompleted];
                    if ([cb status] != MTLCommandBufferStatusError) return true;
                    e = message([cb error]);
                    return false;
                });
                if (!ok) failures.push_back(e);
            }
            committed_.clear();
            {
                std::lock_guard<std::mutex> lock(graph_errors_->mutex);  // (a handler may still be due: next wait)
                for (const std::string& e : graph_errors_->list) failures.push_back("MPSGraph reported: " + e);
                graph_errors_->list.clear();
            }
            if (failures.empty()) return true;
            *error = failures[0];
            if (failures.size() > 1) *error += " (and " + std::to_string(failures.size() - 1) + " more failed segment(s))";
            return false;
        }
    }

    bool busy() override {
        if (open_) return true;
        for (id<MTLCommandBuffer> cb : committed_)
            if ([cb status] < MTLCommandBufferStatusCompleted) return true;
        return false;
    }

private:
    // The open command buffer: an MPSCommandBuffer, so that MPSGraph can encode into it too (it may
    // commitAndContinue it; our kernels and blits then go into its continuation, still in order).
    MPSCommandBuffer* command_buffer() {
        if (!open_) open_ = [MPSCommandBuffer commandBufferFromCommandQueue:queue_];
        return open_;
    }
    // Consecutive kernel launches share one compute encoder (serial dispatch: each sees the last's writes).
    id<MTLComputeCommandEncoder> compute_encoder() {
        if (!encoder_) encoder_ = [command_buffer() computeCommandEncoder];
        return encoder_;
    }
    void end_compute() {
        if (!encoder_) return;
        id<MTLComputeCommandEncoder> e = encoder_;
        encoder_ = nil;  // not reused even if endEncoding raises
        [e endEncoding];
    }
    // MetalDevice sends only what metal_plan::blit_fits allows (macOS: offsets and size multiples of 4).
    void blit(id<MTLBuffer> src, size_t src_offset, id<MTLBuffer> dst, size_t dst_offset, size_t bytes) {
        if (bytes == 0) return;
        if ((src_offset | dst_offset | bytes) % 4 != 0)
            throw DarknetError("metal: a blit of " + std::to_string(bytes) + " bytes not in multiples of 4");
        end_compute();
        id<MTLBlitCommandEncoder> b = [command_buffer() blitCommandEncoder];
        [b copyFromBuffer:src sourceOffset:src_offset toBuffer:dst destinationOffset:dst_offset size:bytes];
        [b endEncoding];
    }

    MPSMatrix* matrix(const MpsMatrixDesc& m) {
        MPSMatrixDescriptor* d = [MPSMatrixDescriptor matrixDescriptorWithRows:m.rows
                                                                       columns:m.columns
                                                                      rowBytes:m.row_bytes
                                                                      dataType:MPSDataTypeFloat32];
        return [[MPSMatrix alloc] initWithBuffer:mtl(m.buffer) offset:m.offset_bytes descriptor:d];
    }

    // One MPSGraph op: its graph is built on the first use of its key, then encoded. A graph that
    // failed (raised half-way through building or encoding) is dropped, not reused.
    template <class Plan>
    bool graph(GraphOp op, const Plan& p, const std::vector<MetalBuffer*>& buffers, std::string* error,
               void (SystemMetalApi::*build)(GraphOp, const Plan&, Graph*)) {
        @autoreleasepool {
            std::string key = std::to_string((int)op) + " " + p.key;
            bool ok = guarded(std::string("MPSGraph ") + graph_op_name(op), error, [&] {
                Graph& g = graphs_[key];
                if (!g.graph) (this->*build)(op, p, &g);
                return run(g, buffers, error, graph_op_name(op));
            });
            if (!ok) graphs_.erase(key);
            return ok;
        }
    }

    static MPSGraphTensor* input(Graph* g, const int64_t* dims) {
        MPSShape* s = shape4(dims);
        MPSGraphTensor* t = [g->graph placeholderWithShape:s dataType:MPSDataTypeFloat32 name:nil];
        g->inputs.push_back(t);
        g->input_shapes.push_back(s);
        return t;
    }
    static void output(Graph* g, MPSGraphTensor* t, const int64_t* dims) {
        g->outputs.push_back(t);
        g->output_shapes.push_back(shape4(dims));
    }

    void build_conv(GraphOp op, const GraphConvPlan& p, Graph* g) {
        g->graph = [[MPSGraph alloc] init];
        MPSGraphConvolution2DOpDescriptor* d =
            [MPSGraphConvolution2DOpDescriptor descriptorWithStrideInX:p.stride_x
                                                             strideInY:p.stride_y
                                                       dilationRateInX:p.dilation_x
                                                       dilationRateInY:p.dilation_y
                                                                groups:p.groups
                                                           paddingLeft:p.pad_left
                                                          paddingRight:p.pad_right
                                                            paddingTop:p.pad_top
                                                         paddingBottom:p.pad_bottom
                                                          paddingStyle:MPSGraphPaddingStyleExplicit
                                                            dataLayout:MPSGraphTensorNamedDataLayoutNCHW
                                                         weightsLayout:MPSGraphTensorNamedDataLayoutOIHW];
        MPSGraph* G = g->graph;
        if (op == GraphOp::conv2d) {
            MPSGraphTensor *x = input(g, p.x), *w = input(g, p.w);
            output(g, [G convolution2DWithSourceTensor:x weightsTensor:w descriptor:d name:nil], p.y);
        } else if (op == GraphOp::conv2d_backward_data) {
            MPSGraphTensor *dy = input(g, p.y), *w = input(g, p.w), *acc = input(g, p.x);
            MPSGraphTensor* dx = [G convolution2DDataGradientWithIncomingGradientTensor:dy
                                                                          weightsTensor:w
                                                                            outputShape:shape4(p.x)
                                                           forwardConvolutionDescriptor:d
                                                                                   name:nil];
            output(g, [G additionWithPrimaryTensor:acc secondaryTensor:dx name:nil], p.x);
        } else {
            MPSGraphTensor *x = input(g, p.x), *dy = input(g, p.y), *acc = input(g, p.w);
            MPSGraphTensor* dw = [G convolution2DWeightsGradientWithIncomingGradientTensor:dy
                                                                              sourceTensor:x
                                                                               outputShape:shape4(p.w)
                                                              forwardConvolutionDescriptor:d
                                                                                      name:nil];
            output(g, [G additionWithPrimaryTensor:acc secondaryTensor:dw name:nil], p.w);
        }
    }

    void build_pool(GraphOp op, const GraphPoolPlan& p, Graph* g) {
        g->graph = [[MPSGraph alloc] init];
        MPSGraphPooling2DOpDescriptor* d =
            [MPSGraphPooling2DOpDescriptor descriptorWithKernelWidth:p.kernel_w
                                                        kernelHeight:p.kernel_h
                                                           strideInX:p.stride_x
                                                           strideInY:p.stride_y
                                                     dilationRateInX:1
                                                     dilationRateInY:1
                                                         paddingLeft:p.pad_left
                                                        paddingRight:p.pad_right
                                                          paddingTop:p.pad_top
                                                       paddingBottom:p.pad_bottom
                                                        paddingStyle:MPSGraphPaddingStyleExplicit
                                                          dataLayout:MPSGraphTensorNamedDataLayoutNCHW];
        d.includeZeroPadToAverage = p.include_zero_pad;
        MPSGraph* G = g->graph;
        MPSGraphTensor* x = input(g, p.x);
        if (op == GraphOp::pool) {
            MPSGraphTensor* y = p.max ? [G maxPooling2DWithSourceTensor:x descriptor:d name:nil]
                                      : [G avgPooling2DWithSourceTensor:x descriptor:d name:nil];
            output(g, y, p.y);
            return;
        }
        MPSGraphTensor *dy = input(g, p.y), *acc = input(g, p.x);
        MPSGraphTensor* dx = p.max ? [G maxPooling2DGradientWithGradientTensor:dy sourceTensor:x descriptor:d name:nil]
                                   : [G avgPooling2DGradientWithGradientTensor:dy sourceTensor:x descriptor:d name:nil];
        output(g, [G additionWithPrimaryTensor:acc secondaryTensor:dx name:nil], p.x);
    }

    // Darknet's training batchnorm in graph arithmetic, the same formulas as kernels/reduce.h.
    void build_norm(GraphOp op, const GraphNormPlan& p, Graph* g) {
        g->graph = [[MPSGraph alloc] init];
        MPSGraph* G = g->graph;
        NSArray<NSNumber*>* axes = @[ @0, @2, @3 ];
        auto k = [&](float v) { return [G constantWithScalar:v dataType:MPSDataTypeFloat32]; };
        auto add = [&](MPSGraphTensor* a, MPSGraphTensor* b) { return [G additionWithPrimaryTensor:a secondaryTensor:b name:nil]; };
        auto sub = [&](MPSGraphTensor* a, MPSGraphTensor* b) { return [G subtractionWithPrimaryTensor:a secondaryTensor:b name:nil]; };
        auto mul = [&](MPSGraphTensor* a, MPSGraphTensor* b) { return [G multiplicationWithPrimaryTensor:a secondaryTensor:b name:nil]; };
        auto div = [&](MPSGraphTensor* a, MPSGraphTensor* b) { return [G divisionWithPrimaryTensor:a secondaryTensor:b name:nil]; };
        if (op == GraphOp::batchnorm_train) {
            MPSGraphTensor *y = input(g, p.shape), *scale = input(g, p.channel_shape), *bias = input(g, p.channel_shape);
            MPSGraphTensor* mean = [G meanOfTensor:y axes:axes name:nil];
            MPSGraphTensor* var = mul([G varianceOfTensor:y meanTensor:mean axes:axes name:nil], k(p.unbiased));
            MPSGraphTensor* xn = div(sub(y, mean), [G squareRootWithTensor:add(var, k(p.eps)) name:nil]);
            output(g, add(mul(xn, scale), bias), p.shape);
            output(g, mean, p.channel_shape);
            output(g, var, p.channel_shape);
            output(g, xn, p.shape);
            return;
        }
        MPSGraphTensor *dy = input(g, p.shape), *xn = input(g, p.shape), *scale = input(g, p.channel_shape),
                       *var = input(g, p.channel_shape), *dscale = input(g, p.channel_shape),
                       *dbias = input(g, p.channel_shape);
        MPSGraphTensor* sdy = [G reductionSumWithTensor:dy axes:axes name:nil];
        MPSGraphTensor* sdyx = [G reductionSumWithTensor:mul(dy, xn) axes:axes name:nil];
        MPSGraphTensor* inv = div(k(1.0f), [G squareRootWithTensor:add(var, k(p.eps)) name:nil]);
        MPSGraphTensor* gmean = div(mul(scale, sdy), k(p.count));
        MPSGraphTensor* gx = div(mul(scale, sdyx), k(p.grad_divisor));
        output(g, mul(inv, sub(sub(mul(scale, dy), gmean), mul(xn, gx))), p.shape);
        output(g, add(dscale, sdyx), p.channel_shape);
        output(g, add(dbias, sdy), p.channel_shape);
    }

    // Encodes graph g on buffers (inputs then outputs) into the open command buffer; results are
    // written straight into the output buffers (resultsDictionary), nothing is copied.
    bool run(const Graph& g, const std::vector<MetalBuffer*>& buffers, std::string* error, const char* what) {
        if (!mps_ok_) return *error = "MPS does not support this device", false;
        if (buffers.size() != g.inputs.size() + g.outputs.size())
            return *error = "wrong number of buffers for the graph", false;
        NSMutableDictionary<MPSGraphTensor*, MPSGraphTensorData*>* feeds = [NSMutableDictionary dictionary];
        NSMutableDictionary<MPSGraphTensor*, MPSGraphTensorData*>* results = [NSMutableDictionary dictionary];
        for (size_t i = 0; i < g.inputs.size(); ++i)
            [feeds setObject:[[MPSGraphTensorData alloc] initWithMTLBuffer:mtl(buffers[i])
                                                                     shape:g.input_shapes[i]
                                                                  dataType:MPSDataTypeFloat32]
                      forKey:g.inputs[i]];
        for (size_t j = 0; j < g.outputs.size(); ++j)
            [results setObject:[[MPSGraphTensorData alloc] initWithMTLBuffer:mtl(buffers[g.inputs.size() + j])
                                                                       shape:g.output_shapes[j]
                                                                    dataType:MPSDataTypeFloat32]
                        forKey:g.outputs[j]];
        MPSGraphExecutionDescriptor* desc = [[MPSGraphExecutionDescriptor alloc] init];
        std::shared_ptr<GraphErrors> errors = graph_errors_;
        std::string name = what;
        desc.completionHandler = ^(MPSGraphTensorDataDictionary*, NSError* e) {
            if (!e) return;
            std::lock_guard<std::mutex> lock(errors->mutex);
            errors->list.push_back(name + ": " + message(e));  // "MPSGraph reported: conv2d: ..."
        };
        end_compute();
        MPSCommandBuffer* cb = command_buffer();
        id<MTLCommandBuffer> before = [cb rootCommandBuffer];
        [g.graph encodeToCommandBuffer:cb feeds:feeds targetOperations:nil resultsDictionary:results executionDescriptor:desc];
        if ([cb rootCommandBuffer] != before) committed_.push_back(before);  // commitAndContinue committed it
        return true;
    }

    id<MTLDevice> device_;
    id<MTLCommandQueue> queue_;
    bool mps_ok_;
    id<MTLLibrary> library_ = nil;
    std::map<std::string, id<MTLComputePipelineState>> pipelines_;
    std::map<std::string, MPSMatrixMultiplication*> gemms_;
    std::map<std::string, Graph> graphs_;
    MPSCommandBuffer* open_ = nil;
    id<MTLComputeCommandEncoder> encoder_ = nil;
    std::vector<id<MTLCommandBuffer>> committed_;  // every segment committed since the last wait, in order
    std::shared_ptr<GraphErrors> graph_errors_ = std::make_shared<GraphErrors>();
    std::string commit_error_;  // a commit that raised, for the next wait
};

id<MTLDevice> system_device(std::string* why) {
    id<MTLDevice> d = MTLCreateSystemDefaultDevice();
    if (!d) *why = "no Metal device (MTLCreateSystemDefaultDevice returned none)";
    return d;
}

}  // namespace

std::unique_ptr<MetalApi> open_system_metal_api(std::string* why) {
    @autoreleasepool {
        id<MTLDevice> d = system_device(why);
        if (!d) return nullptr;
        return std::make_unique<SystemMetalApi>(d);
    }
}

bool probe_system_metal(DeviceInfo* info, std::string* why) {
    @autoreleasepool {
        id<MTLDevice> d = system_device(why);
        if (!d) return false;
        *info = SystemMetalApi(d).describe();
        return true;
    }
}

}  // namespace dn
