// The CPU kernels (this folder, less thread_pool and cpu_isa) are compiled once per instruction set
// (CMakeLists.txt: darknet_cpu_isa_variant), e.g. for AVX-512, for AVX2+FMA and for the x86-64
// baseline, and cpu_isa.cpp picks one at run time. Each copy lives in its own inline namespace,
// named by DARKNET_ISA (isa_avx2, ...), so the copies' symbols never meet: code inside calls its
// own copy unqualified, code outside goes through cpu_isa() (cpu_isa.h).
#pragma once

#ifndef DARKNET_ISA
#error "src-lib/cpu kernels are built per instruction set: compile them through darknet_cpu_isa_variant (CMakeLists.txt), which defines DARKNET_ISA"
#endif
