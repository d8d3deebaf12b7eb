"""The Metal Shading Language text (darknet_py.metal_source()), checked on machines without a Mac:
every kernel of src-lib/kernels is in it, and clang in a mode that models MSL's address spaces
(msl_check/check_msl.py) finds no error in it, but does find each of a set of bugs planted in copies."""
import os
import re
import subprocess
import sys

import pytest

import darknet_py
from darknet_py import _core

from msl_check import check_msl

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src-lib", "kernels")


def kernel_names(text: str) -> set:
    """KERNEL(name) in kernel text, and KERNEL(S_NAME(name)) of storage_kernels.h as name_<type> for each
    storage type the text instantiates (`#define S_NAME(name) name##_f16` in storage_f16.h)."""
    names = set(re.findall(r"^KERNEL\((\w+)\)", text, re.M))
    suffixes = set(re.findall(r"^#define S_NAME\(name\) name##_(\w+)", text, re.M))
    return names | {f"{n}_{t}" for n in re.findall(r"^KERNEL\(S_NAME\((\w+)\)\)", text, re.M) for t in suffixes}


def source_kernel_names():
    """The kernels of the kernel files (the compat preludes only define the macro)."""
    text = ""
    for f in sorted(os.listdir(KERNEL_DIR)):
        if f.endswith(".h") and not f.startswith("compat_"):
            with open(os.path.join(KERNEL_DIR, f)) as fh:
                text += fh.read() + "\n"
    return kernel_names(text)


needs_sources = pytest.mark.skipif(not os.path.isdir(KERNEL_DIR), reason="src-lib/kernels not found (installed copy?)")
needs_clang = pytest.mark.skipif(check_msl.available() is not None, reason=str(check_msl.available()))


@pytest.fixture(scope="module")
def msl():
    return darknet_py.metal_source()


def test_metal_source_is_the_prelude_then_the_kernel_text(msl):
    assert msl.startswith("// The kernel text's macros for the Metal Shading Language")
    assert "#include <metal_stdlib>" in msl and "using namespace metal;" in msl
    opencl = _core.kernel_source("opencl")
    # the same kernel text after each prelude
    kernels_at = msl.index("// ---- ")
    assert opencl.endswith(msl[kernels_at:])
    assert "#pragma OPENCL FP_CONTRACT OFF" in opencl and "#pragma OPENCL" not in msl


def test_unknown_device_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="no kernel source for device kind 'vulkan' \\(known: opencl, metal\\)"):
        _core.kernel_source("vulkan")


def test_cli_prints_metal_source(msl):
    r = subprocess.run([sys.executable, "-m", "darknet_py", "info", "--metal-source"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == msl


@needs_sources
def test_every_kernel_is_in_the_embedded_text(msl):
    names = source_kernel_names()
    assert len(names) >= 40
    embedded = kernel_names(msl)
    assert embedded == names, f"kernel files not embedded (CMakeLists GPU_KERNEL_FILES): {names - embedded}"


@needs_clang
@needs_sources
def test_msl_compiles_with_an_entry_point_per_kernel(msl):
    result = check_msl.check(msl)
    assert result.errors == [], "\n".join(map(str, result.diagnostics[:20]))
    # kernel functions as the compiler sees them (`kernel void NAME` after the macros expand)
    assert set(result.kernels) == source_kernel_names()
    thread_ids = ["thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
                  "threads_per_threadgroup"]
    for name, attrs in result.kernels.items():
        assert attrs[-4:] == thread_ids, name
        assert attrs[:-4] == [f"buffer({i})" for i in range(len(attrs) - 4)], name


def _plant(text, old, new, count=1):
    assert old in text, f"planting site {old!r} not found: update the test to the kernel text"
    return text.replace(old, new, count)


# (what is planted, text to replace, replacement, a fragment of the error it must cause)
PLANTS = [
    ("undeclared name", "float r = act_div(xs * n, n + 2.0f, approx);", "float r = act_div(xs * n, log1p_typo(n + 2.0f), approx);", "undeclared identifier 'log1p_typo'"),
    ("wrong vector type", "    rolling[i] = a.keep * rolling[i] + (1.0f - a.keep) * batch_value[i];\n", "    float2 v2 = (float2)(a.keep);\n    rolling[i] = v2.z;\n",
     "vector component access exceeds type"),
    ("write through a constant reference", "    rolling[i] = a.keep * rolling[i] + (1.0f - a.keep) * batch_value[i];\n", "    a.n = 0;\n    rolling[i] = a.keep * rolling[i] + (1.0f - a.keep) * batch_value[i];\n",
     "read-only variable is not assignable"),
    ("write through a const device pointer", "    y[i] = from[i] * s[k];\n", "    s[k] = 0.0f;\n    y[i] = from[i] * s[k];\n",
     "read-only variable is not assignable"),
    ("device/threadgroup pointer mix-up", "    GROUP_SUM(partial, sum)\n    if (KLID == 0) db[c] += sum;",
     "    KGLOBAL float* wrong = partial;\n    GROUP_SUM(partial, sum)\n    if (KLID == 0) db[c] += sum;",
     "of type '__local float[256]'"),
    ("threadgroup memory in a helper", "KFN float act_forward(float x, int a, int approx) {\n",
     "KFN float act_forward(float x, int a, int approx) {\n    KSHARED float scratch[4];\n", "local address space"),
    ("barrier without flags", "#define KBARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)",
     "#define KBARRIER() threadgroup_barrier()", "no matching function for call to 'threadgroup_barrier'"),
    ("atomic on a plain int", "atomic_fetch_add_explicit((device atomic_int*)(p)", "atomic_fetch_add_explicit((p)",
     "no matching function for call to 'atomic_fetch_add_explicit'"),
    ("misspelt attribute", "[[thread_position_in_grid]]", "[[thread_position_in_grd]]",
     "unknown attribute 'thread_position_in_grd'"),
    ("missing [[buffer(i)]]", "#define KCBUF(T, name, index) device const T* name [[buffer(index)]]",
     "#define KCBUF(T, name, index) device const T* name", "0 MSL attributes, expected exactly one"),
    ("duplicate buffer index", "KCBUF(float, batch_value, 1), KARGS(RollingArgs, a, 2)",
     "KCBUF(float, batch_value, 1), KARGS(RollingArgs, a, 1)", "[[buffer(1)]] but it is buffer 2"),
    ("OpenCL spelling", "#define KSHARED threadgroup", "#define KSHARED __local", "'__local' is OpenCL C, not MSL"),
    ("double", "    rolling[i] = a.keep * rolling[i] + (1.0f - a.keep) * batch_value[i];\n", "    double d = a.keep;\n    rolling[i] = a.keep * rolling[i] + (1.0f - a.keep) * batch_value[i];\n", "MSL has no 'double'"),
    ("program-scope variable", "KFN float act_forward", "float calls_ = 0.0f;\nKFN float act_forward",
     "program-scope variable 'calls_' must be in the constant address space"),
    ("half storage read through as_type of another size", "as_type<float>(((uint)(p)[i]) << 16)",
     "as_type<float>((p)[i])", "as_type between types of different sizes"),
    # a rule of ours, perhaps stricter than Apple's compiler: helpers read the argument struct in place
    ("argument struct copied out of constant memory", "KARGS_PARAM(PoolArgs) a, int is_max", "PoolArgs a, int is_max",
     "no matching constructor for initialization of 'PoolArgs'"),
]


@needs_clang
@pytest.mark.parametrize("what,old,new,expected", PLANTS, ids=[p[0] for p in PLANTS])
def test_planted_bug_is_caught(msl, what, old, new, expected):
    result = check_msl.check(_plant(msl, old, new))
    messages = [d.message for d in result.errors]
    assert any(expected in m for m in messages), f"{what}: not caught; errors: {messages[:10]}"
