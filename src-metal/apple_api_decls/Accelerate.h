// Declarations of exactly the Accelerate (vecLib CBLAS) API that src-lib/cpu/gemm.cpp uses, for the
// macOS cross-compile in CI (src-test/test_macos_cross.py), which has no Apple SDK. Not used on a Mac,
// where <Accelerate/Accelerate.h> is included; tools/macos_sdk_check.py compares these with the SDK's.
// Apple documentation: https://developer.apple.com/documentation/accelerate/blas
#pragma once

// .../accelerate/cblas_order, .../accelerate/cblas_transpose
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

// .../accelerate/1513264-cblas_sgemm (the classic LP64 interface, exported by every macOS)
extern "C" void cblas_sgemm(const enum CBLAS_ORDER __Order, const enum CBLAS_TRANSPOSE __TransA,
                            const enum CBLAS_TRANSPOSE __TransB, const int __M, const int __N, const int __K,
                            const float __alpha, const float* __A, const int __lda, const float* __B, const int __ldb,
                            const float __beta, float* __C, const int __ldc);
