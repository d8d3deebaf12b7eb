# 64-bit ARM Linux with Debian's GNU cross compiler (apt-get install g++-aarch64-linux-gnu).
#
# The Python module is built against the target's own Python: give its prefix as
# -DPython_ROOT_DIR=<arm64 root>/usr, e.g. Debian's arm64 libpython3.X-dev unpacked into a folder
# (tools/arm64_emulated_ops.sh makes one). FindPython reads its headers and extension suffix from the
# target's aarch64-linux-gnu-python3.X-config there, a shell script that runs on the build machine.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Else pybind11 asks the build machine's interpreter, and the module gets its headers and its suffix
set(PYBIND11_USE_CROSSCOMPILING ON)
# Debian's pyconfig.h includes <aarch64-linux-gnu/python3.X/pyconfig.h>, which the target finds
# through its /usr/include; here that is the Python root's include folder
if(DEFINED Python_ROOT_DIR)
  set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES ${Python_ROOT_DIR}/include)
endif()
