// A/B of the NHWC elementwise passes (affine_act_nhwc, batchnorm_normalize_nhwc) of two builds of the
// kernel text, timed on the shapes of yolov4's layers at 608, batch 64 (fp16 and bf16; mish, leaky,
// swish), beside each pass's bytes floor at 4.8 TB/s, plus a hand-written two-channels-a-thread
// (half2) mish epilogue: what that layout would gain. On a CUDA machine:
//   nvcc --cubin -O3 --fmad=false -arch=sm_90 -o before.cubin <build of the old code>/gpu_kernels_cuda.cu
//   nvcc --cubin -O3 --fmad=false -arch=sm_90 -o after.cubin <build of the new code>/gpu_kernels_cuda.cu
//   nvcc -O3 -arch=sm_90 -o nhwc_passes_ab benchmarks/nhwc_passes_ab.cu && ./nhwc_passes_ab before.cubin after.cubin
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <string>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1);} } while (0)
struct AffineActArgs { int32_t n, channels, plane, has_scale, act; };
struct BatchnormTrainArgs { int32_t batch, channels, plane; float eps; int32_t act, chunks; };

// act_forward's mish in half storage (activation_math.h), written out: the kernel text's helpers need the
// embedded text's CUDA prelude, not this file's headers
__device__ __forceinline__ float mish_fast(float x) {
    float xs = x > 20.f ? 20.f : x, e = __expf(xs), n = e * (e + 2.f);
    float r = __fdividef(xs * n, n + 2.f);
    return x > 20.f ? x + 0.f * r : r;
}
// two channels a thread, 8 rows
extern "C" __global__ void affine_mish_half2(__half2* y, const float* scale, const float* shift, AffineActArgs a) {
    uint32_t pairs = a.channels / 2, rows = a.n / a.channels, chunks = (rows + 7) / 8;
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= pairs * chunks) return;
    uint32_t p = t % pairs, r0 = t / pairs;
    float2 k = make_float2(scale[2 * p], scale[2 * p + 1]), b = make_float2(shift[2 * p], shift[2 * p + 1]);
    float2 v[8];
    #pragma unroll
    for (int e = 0; e < 8; ++e) { uint32_t r = r0 + e * chunks; v[e] = r < rows ? __half22float2(y[r * pairs + p]) : make_float2(0, 0); }
    #pragma unroll
    for (int e = 0; e < 8; ++e) { v[e].x = mish_fast(v[e].x * k.x + b.x); v[e].y = mish_fast(v[e].y * k.y + b.y); }
    #pragma unroll
    for (int e = 0; e < 8; ++e) { uint32_t r = r0 + e * chunks; if (r < rows) y[r * pairs + p] = __floats2half2_rn(v[e].x, v[e].y); }
}

int main(int argc, char** argv) {
    const char* files[2] = {argv[1], argv[2]};
    cudaLibrary_t lib[2];
    for (int i = 0; i < 2; ++i) CK(cudaLibraryLoadFromFile(&lib[i], files[i], nullptr, nullptr, 0, nullptr, nullptr, 0));
    struct Shape { int rows, c; } shapes[] = {{64 * 304 * 304, 64}, {64 * 152 * 152, 128}, {64 * 76 * 76, 256}, {64 * 38 * 38, 512}, {64 * 19 * 19, 1024}};
    size_t most = (size_t)64 * 304 * 304 * 64;
    void *y, *xn; float *sc, *sh, *mean, *var;
    CK(cudaMalloc(&y, most * 2)); CK(cudaMalloc(&xn, most * 2));
    CK(cudaMalloc(&sc, 4096 * 4)); CK(cudaMalloc(&sh, 4096 * 4)); CK(cudaMalloc(&mean, 4096 * 4)); CK(cudaMalloc(&var, 4096 * 4));
    { std::vector<__half> h(most); uint32_t s = 1; for (size_t i = 0; i < most; ++i) { s = s * 1664525u + 1013904223u; h[i] = __float2half(((s >> 8) / 16777216.0f) * 6 - 3); }
      CK(cudaMemcpy(y, h.data(), most * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(xn, h.data(), most * 2, cudaMemcpyHostToDevice)); }
    { std::vector<float> o(4096, 1.0f), z(4096, 0.0f); CK(cudaMemcpy(sc, o.data(), 16384, cudaMemcpyHostToDevice)); CK(cudaMemcpy(var, o.data(), 16384, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(sh, z.data(), 16384, cudaMemcpyHostToDevice)); CK(cudaMemcpy(mean, z.data(), 16384, cudaMemcpyHostToDevice)); }
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    auto time = [&](auto launch) { for (int i = 0; i < 3; ++i) launch(); CK(cudaEventRecord(e0)); for (int i = 0; i < 20; ++i) launch(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); return ms / 20; };
    const char* types[] = {"f16", "bf16"};
    int acts[] = {7, 1, 6};  // mish, leaky, swish
    const char* actn[] = {"mish", "leaky", "swish"};
    double total[3][2][2] = {};  // [affine, normalize, half2 affine][mish, leaky][before, after]; fp16
    for (auto s : shapes) {
        size_t n = (size_t)s.rows * s.c;
        double floor_ms = 2.0 * n * 2 / 4.8e12 * 1e3, floor_bn = 3.0 * n * 2 / 4.8e12 * 1e3;
        for (int ti = 0; ti < 2; ++ti)
            for (int ai = 0; ai < 3; ++ai) {
                float t[2][2];
                for (int v = 0; v < 2; ++v) {
                    cudaKernel_t k; std::string nm = std::string("affine_act_nhwc_") + types[ti];
                    CK(cudaLibraryGetKernel(&k, lib[v], nm.c_str()));
                    AffineActArgs a{(int)n, s.c, 1, 1, acts[ai]};
                    size_t threads = (size_t)s.c * ((s.rows + 7) / 8);
                    void* args[] = {&y, &sc, &sh, &a};
                    t[0][v] = time([&] { CK(cudaLaunchKernel((const void*)k, dim3((threads + 255) / 256), dim3(256), args, 0, 0)); });
                    cudaKernel_t kb; std::string nb = std::string("batchnorm_normalize_nhwc_") + types[ti];
                    CK(cudaLibraryGetKernel(&kb, lib[v], nb.c_str()));
                    BatchnormTrainArgs b{64, s.c, s.rows / 64, 1e-5f, acts[ai], 1};
                    void* bargs[] = {&y, &xn, &mean, &var, &sc, &sh, &b};
                    t[1][v] = time([&] { CK(cudaLaunchKernel((const void*)kb, dim3((threads + 255) / 256), dim3(256), bargs, 0, 0)); });
                }
                if (ai < 2) for (int kk = 0; kk < 2; ++kk) for (int v = 0; v < 2; ++v) if (ti == 0) total[kk][ai][v] += t[kk][v];
                printf("%-5s %-6s rows %9d c %4d | affine_act_nhwc old %.3f new %.3f ms (floor %.3f) | batchnorm_normalize_nhwc old %.3f new %.3f ms (floor %.3f)\n",
                       types[ti], actn[ai], s.rows, s.c, t[0][0], t[0][1], floor_ms, t[1][0], t[1][1], floor_bn);
            }
        AffineActArgs a{(int)n, s.c, 1, 1, 7};
        size_t threads = (size_t)(s.c / 2) * ((s.rows + 7) / 8);
        float th = time([&] { affine_mish_half2<<<(threads + 255) / 256, 256>>>((__half2*)y, sc, sh, a); });
        CK(cudaGetLastError());
        total[2][0][1] += th;
        printf("f16   mish   rows %9d c %4d | half2 two channels a thread %.3f ms\n", s.rows, s.c, th);
    }
    printf("sum over the shapes, f16: affine mish old %.3f new %.3f half2 %.3f; leaky old %.3f new %.3f; normalize mish old %.3f new %.3f; leaky old %.3f new %.3f\n",
           total[0][0][0], total[0][0][1], total[2][0][1], total[0][1][0], total[0][1][1], total[1][0][0], total[1][0][1], total[1][1][0], total[1][1][1]);
    return 0;
}
