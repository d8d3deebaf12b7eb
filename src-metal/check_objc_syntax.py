"""Compile-checks metal_objc.mm on any machine: `-x objective-c++ -fsyntax-only` through libclang (pip
`libclang`), against apple_api_decls/ (declarations of exactly the Metal, MPS and Foundation API the
file uses) instead of Apple's frameworks. A misspelt selector, a wrong argument type or a C++ error
fails it. Run: python src-metal/check_objc_syntax.py [file.mm]; exit status 1 with the errors.
"""
import glob
import os
import sys
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "metal_objc.mm")


def builtin_include_dir() -> Optional[str]:
    """stddef.h and friends: the pip libclang wheel ships no resource headers; GCC's serve."""
    for pattern in ("/usr/lib/llvm-*/lib/clang/*/include", "/usr/lib/gcc/*/*/include"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[-1]
    return None


def errors(path: str = SOURCE, text: Optional[str] = None) -> List[str]:
    """The errors (and fatal errors) of the check, as 'file:line:col: message'; [] when clean.
    `text`: check this text as if it were the file at `path` (for the planted-error tests)."""
    import clang.cindex as ci  # pip install libclang (the test extra has it)

    args = ["-x", "objective-c++", "-std=c++17", "-fobjc-arc", "-fobjc-exceptions", "-fblocks",
            "-fobjc-runtime=macosx-14.0",
            "-DDARKNET_PY_APPLE_API_DECLS", "-DDARKNET_PY_METAL", "-I" + HERE,
            "-I" + os.path.join(os.path.dirname(HERE), "src-lib")]
    inc = builtin_include_dir()
    if inc:
        args += ["-isystem", inc]
    unsaved = [(path, text)] if text is not None else None
    tu = ci.Index.create().parse(path, args=args, unsaved_files=unsaved)
    return [str(d) for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]


if __name__ == "__main__":
    found = errors(sys.argv[1] if len(sys.argv) > 1 else SOURCE)
    for e in found:
        print(e)
    print("metal_objc.mm: %s" % ("%d error(s)" % len(found) if found else "syntax check passed"))
    sys.exit(1 if found else 0)
