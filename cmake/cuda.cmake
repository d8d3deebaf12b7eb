# The CUDA device (src-cuda), built when a CUDA toolkit is found (DARKNET_PY_CUDA=AUTO|ON|OFF).
#
# Kernels: the embedded kernel text with the CUDA prelude (kernels/compat_cuda.h) is compiled by nvcc
# at build time into one fatbin, embedded in the module and loaded with cudaLibraryLoadData when the
# device opens (a few ms). Compiling the same text with NVRTC at run time took 10 s here (measured
# 2026-11-23 on a 2-core EPYC, sm_90; nvcc: 3 s of CPU for the same file), once per process unless
# cached, and would add libnvrtc as a run-time dependency. cuBLAS is opened at run time (dlopen), so
# the toolkit's nvcc and cudart (linked statically) are all the build needs.
#
# Architectures: DARKNET_PY_CUDA_ARCHS (e.g. "80;90"), else the GPU of this machine (nvidia-smi),
# else SASS for every major family CUDA 13 supports plus PTX that newer GPUs compile at load time.
set(DARKNET_PY_CUDA AUTO CACHE STRING "Build the CUDA device: AUTO (when a toolkit is found), ON, OFF")
set(DARKNET_PY_CUDA_ARCHS "" CACHE STRING "CUDA architectures, e.g. 80;90 (default: this machine's GPU)")
set(DARKNET_PY_HAS_CUDA OFF)

# AUTO never builds it into a cross build: a machine's toolkit targets that machine
if(DARKNET_PY_CUDA STREQUAL "ON" OR (DARKNET_PY_CUDA STREQUAL "AUTO" AND NOT CMAKE_CROSSCOMPILING))
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE AND TARGET CUDA::cudart_static)
    set(DARKNET_PY_HAS_CUDA ON)
  elseif(DARKNET_PY_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DARKNET_PY_CUDA=ON but no CUDA toolkit (nvcc, cudart) was found; set CUDAToolkit_ROOT")
  endif()
endif()

if(DARKNET_PY_HAS_CUDA)
  set(archs "${DARKNET_PY_CUDA_ARCHS}")
  if(NOT archs)
    execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE smi RESULT_VARIABLE smi_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(smi_rc EQUAL 0 AND smi)
      string(REPLACE "." "" smi "${smi}")
      string(REPLACE "\n" ";" archs "${smi}")
      list(REMOVE_DUPLICATES archs)
    else()
      set(archs 75 80 90 100 120)
    endif()
  endif()
  set(gencode "")
  foreach(a IN LISTS archs)
    list(APPEND gencode "-gencode=arch=compute_${a},code=sm_${a}")
  endforeach()
  list(GET archs -1 newest)
  list(APPEND gencode "-gencode=arch=compute_${newest},code=compute_${newest}")
  set(DARKNET_PY_CUDA_LIB_DIR "${CUDAToolkit_LIBRARY_DIR}")  # one place cublas_api.cpp looks
  message(STATUS "darknet_py: CUDA device ${CUDAToolkit_VERSION} for architectures ${archs}")

  set(CUDA_FLAT_TEXT ${CMAKE_CURRENT_BINARY_DIR}/gpu_kernels_cuda.cu)
  set(CUDA_FATBIN ${CMAKE_CURRENT_BINARY_DIR}/gpu_kernels_cuda.fatbin)
  set(CUDA_FATBIN_C ${CMAKE_CURRENT_BINARY_DIR}/gpu_kernels_cuda_fatbin.inc)
  add_custom_command(
    OUTPUT ${CUDA_FATBIN}
    COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} --fatbin -O3 --fmad=false ${gencode} -o ${CUDA_FATBIN} ${CUDA_FLAT_TEXT}
    DEPENDS ${CUDA_FLAT_TEXT}
    COMMENT "Compiling the GPU kernel text for CUDA (${archs})"
    VERBATIM)
  add_custom_command(
    OUTPUT ${CUDA_FATBIN_C}
    COMMAND ${CMAKE_COMMAND} -DBIN2C=${CUDAToolkit_BIN_DIR}/bin2c -DIN=${CUDA_FATBIN} -DOUT=${CUDA_FATBIN_C}
            -P ${CMAKE_CURRENT_LIST_DIR}/bin2c.cmake
    DEPENDS ${CUDA_FATBIN} ${CMAKE_CURRENT_LIST_DIR}/bin2c.cmake
    VERBATIM)
endif()
