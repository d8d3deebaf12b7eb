"""Compile-checks Metal Shading Language text on any machine (no Mac, no Metal compiler).

MSL is C++14 with address spaces. Clang's "C++ for OpenCL 2021" mode is C++17 with address spaces,
so metal_source() parsed in that mode, with metal_stdlib_shim.h standing in for <metal_stdlib>, gets
most of the checks Apple's compiler makes: undeclared names, wrong types (vectors included), writes
to constant data, pointers converted between device, threadgroup and constant memory, barriers and
atomics called wrongly, threadgroup variables outside kernels. On top of clang's own diagnostics,
check() adds what clang cannot see:

  * attributes: every attribute but the MSL ones the shim declares is unknown to clang; its warning
    is made an error (a misspelt [[thread_position_in_grid]] would be a missing binding on the Mac);
  * kernel parameters: each has exactly one MSL attribute; buffers and argument structs (pointers
    and references) have [[buffer(i)]] with i their position among them (the index MetalDevice binds
    them at, so also no duplicates); scalars have a thread-position attribute, each at most once;
  * OpenCL spellings (__global, __kernel, ...), which the mode accepts as keywords but MSL does not;
  * MSL rules the mode does not share: no `double`; variables at program scope only in `constant`.

What it cannot see: MSL-only rules the mode does not share (e.g. limits on threadgroup memory size),
and code generation. The Mac's own compile (MetalDevice, macOS CI) remains the last word.

Uses the `libclang` wheel (clang.cindex); tests skip when it is missing.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional

SHIM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metal_stdlib_shim.h")
SOURCE_NAME = "/msl_check/kernels.metal"  # virtual paths: nothing is written to disk
SHIM_DIR = "/msl_check/include"

# -cl-no-stdinc: no OpenCL built-in header, so OpenCL's function names are undeclared (as in MSL);
# -Werror=unknown-attributes: a misspelt MSL attribute is an error, not a warning clang ignores.
# -cl-ext=+cl_khr_fp16: MSL's half is native (loads, stores and arithmetic), as with that extension.
CLANG_ARGS = ["-x", "cl", "-cl-std=clc++2021", "-cl-no-stdinc", "-Xclang", "-cl-ext=+cl_khr_fp16", "-I" + SHIM_DIR,
              "-Werror=unknown-attributes", "-ferror-limit=0"]

OPENCL_SPELLINGS = {"__global", "__local", "__private", "__constant", "__kernel", "global", "local",
                    "__read_only", "__write_only", "get_global_id", "get_local_id", "get_group_id",
                    "barrier", "CLK_LOCAL_MEM_FENCE", "CLK_GLOBAL_MEM_FENCE"}
THREAD_ATTRIBUTES = {"thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
                     "threads_per_threadgroup", "threads_per_grid", "threadgroups_per_grid",
                     "thread_index_in_threadgroup", "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup",
                     "threads_per_simdgroup"}


@dataclass
class Diagnostic:
    severity: str  # "error" or "warning"
    line: int      # in the checked text (1-based; 0 when clang gave no location)
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: line {self.line}: {self.message}"


@dataclass
class Result:
    diagnostics: List[Diagnostic]
    kernels: Dict[str, List[str]]  # kernel name -> its parameters' MSL attributes, in order

    @property
    def errors(self) -> List[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def available() -> Optional[str]:
    """None when libclang can be loaded, else why not (for pytest.skip)."""
    try:
        import clang.cindex as ci

        ci.Index.create()
        return None
    except Exception as e:  # ImportError, or a LibclangError when the shared library is missing
        return f"libclang (pip install libclang) is not usable: {e}"


def check(text: str) -> Result:
    """Parses MSL `text` (metal_source() or a variant) and returns every problem found."""
    import clang.cindex as ci

    with open(SHIM_PATH) as f:
        shim = f.read()
    index = ci.Index.create()
    tu = index.parse(SOURCE_NAME, args=CLANG_ARGS,
                     unsaved_files=[(SOURCE_NAME, text), (SHIM_DIR + "/metal_stdlib", shim)])
    out: List[Diagnostic] = []
    for d in tu.diagnostics:
        if d.severity < ci.Diagnostic.Warning:
            continue
        where = d.location.file.name if d.location.file else ""
        line = d.location.line if where == SOURCE_NAME else 0
        text_where = "" if where in ("", SOURCE_NAME) else f" (in {os.path.basename(where)})"
        out.append(Diagnostic("error" if d.severity >= ci.Diagnostic.Error else "warning", line,
                              d.spelling + text_where))
    kernels = _check_kernels(ci, tu, out)
    _check_spellings(ci, tu, out)
    _check_program_scope(ci, tu, out)
    return Result(out, kernels)


def _msl_attributes(ci, param) -> List[str]:
    return [c.spelling[len("msl_"):] for c in param.get_children()
            if c.kind == ci.CursorKind.ANNOTATE_ATTR and c.spelling.startswith("msl_")]


def _check_kernels(ci, tu, out: List[Diagnostic]) -> Dict[str, List[str]]:
    kernels: Dict[str, List[str]] = {}
    for fn in tu.cursor.get_children():
        if fn.kind != ci.CursorKind.FUNCTION_DECL or not fn.is_definition():
            continue
        if not any(c.kind == ci.CursorKind.ANNOTATE_ATTR and c.spelling == "msl_kernel" for c in fn.get_children()):
            continue
        line = fn.location.line
        attrs_of_kernel: List[str] = []
        buffers = 0
        seen_thread_attrs = set()
        for p in fn.get_arguments():
            attrs = _msl_attributes(ci, p)
            attrs_of_kernel.append(",".join(attrs))
            where = f"kernel {fn.spelling}, parameter {p.spelling}"
            if len(attrs) != 1:
                out.append(Diagnostic("error", line, f"{where}: {len(attrs)} MSL attributes, expected exactly one"))
                continue
            attr = attrs[0]
            is_resource = p.type.kind in (ci.TypeKind.POINTER, ci.TypeKind.LVALUEREFERENCE)
            m = re.fullmatch(r"buffer\((\d+)\)", attr)
            if is_resource:
                if not m:
                    out.append(Diagnostic("error", line, f"{where}: a buffer needs [[buffer(i)]], has [[{attr}]]"))
                elif int(m.group(1)) != buffers:
                    out.append(Diagnostic("error", line, f"{where}: [[buffer({m.group(1)})]] but it is buffer "
                                          f"{buffers} in order (MetalDevice binds argument i at index i)"))
                buffers += 1
            elif attr not in THREAD_ATTRIBUTES:
                out.append(Diagnostic("error", line, f"{where}: a scalar parameter needs a thread-position "
                                      f"attribute, has [[{attr}]]"))
            elif attr in seen_thread_attrs:
                out.append(Diagnostic("error", line, f"{where}: [[{attr}]] given twice"))
            seen_thread_attrs.add(attr)
        kernels[fn.spelling] = attrs_of_kernel
    return kernels


def _check_spellings(ci, tu, out: List[Diagnostic]) -> None:
    for tok in tu.get_tokens(extent=tu.cursor.extent):
        if tok.kind not in (ci.TokenKind.KEYWORD, ci.TokenKind.IDENTIFIER):
            continue
        if not tok.location.file or tok.location.file.name != SOURCE_NAME:
            continue
        if tok.spelling in OPENCL_SPELLINGS:
            out.append(Diagnostic("error", tok.location.line,
                                  f"'{tok.spelling}' is OpenCL C, not MSL (use the compat macros)"))
        elif tok.spelling == "double":
            out.append(Diagnostic("error", tok.location.line, "MSL has no 'double' (Apple GPUs have no fp64)"))


def _check_program_scope(ci, tu, out: List[Diagnostic]) -> None:
    for c in tu.cursor.get_children():
        if c.kind == ci.CursorKind.VAR_DECL and c.location.file and c.location.file.name == SOURCE_NAME:
            if "__constant" not in c.type.spelling:
                out.append(Diagnostic("error", c.location.line, f"program-scope variable '{c.spelling}' must be "
                                      "in the constant address space in MSL"))


def main(argv=None) -> int:
    """`python check_msl.py [FILE]`: checks FILE, or darknet_py.metal_source(); exit 1 on errors."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    why = available()
    if why:
        print(why, file=sys.stderr)
        return 2
    if argv:
        with open(argv[0]) as f:
            text = f.read()
    else:
        import darknet_py

        text = darknet_py.metal_source()
    result = check(text)
    for d in result.diagnostics:
        print(d)
    print(f"{len(result.kernels)} kernels, {len(result.errors)} errors")
    return 1 if result.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
