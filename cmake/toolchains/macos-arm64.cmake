# The macOS arm64 build, cross-compiled on Linux through CMakeLists.txt's Apple branch:
# tools/macos_sdk_check.py (clang and lld against Apple's SDK headers and .tbd stubs) and
# src-test/test_macos_cross.py (zig, which carries macOS's libc and libc++ headers, against our own
# declarations of the frameworks). The caller names the compiler, CMAKE_OSX_SYSROOT and
# CMAKE_OSX_DEPLOYMENT_TARGET.
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)
set(CMAKE_OSX_ARCHITECTURES arm64)
set(CMAKE_CXX_COMPILER_TARGET arm64-apple-macos)
set(CMAKE_OBJCXX_COMPILER_TARGET arm64-apple-macos)
# frameworks and libraries from the SDK, programs and pybind11's CMake files from the host
set(CMAKE_FIND_ROOT_PATH ${CMAKE_OSX_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# CMake's compiler checks link a program; the cross linkers have no macOS C runtime to link it with
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
# a cross build is never installed, and Linux has no install_name_tool to rewrite install names with
set(CMAKE_INSTALL_NAME_TOOL /bin/true)
