#!/usr/bin/env python3
"""Compare our declarations of the Apple API (src-metal/apple_api_decls/) with Apple's SDK headers.

The Linux checks (the Objective-C++ syntax check and the macOS cross-compile in CI) compile against
our declarations because CI has no Apple SDK. They are only as good as those declarations, so each of
them is looked up in the real SDK through libclang: every method (by selector, on the class, its
categories, protocols and superclasses), property (or its getter), C function, enum constant (by
value) and typedef must exist there with the same types, ignoring nullability. Each one's macOS
availability is read from the SDK declaration and must be no newer than our minimum macOS.

    python tools/apple_decls_vs_sdk.py SDK_DIR [--minimum 13.0]

Used by tools/macos_sdk_check.py for each SDK it unpacks. Needs libclang (pip, the test extra) and
the builtin headers of a clang no newer than it (Debian: clang-16).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DECLS = REPO / "src-metal" / "apple_api_decls"
SDK_IMPORTS = ["Foundation/Foundation.h", "Metal/Metal.h", "MetalPerformanceShaders/MetalPerformanceShaders.h",
               "MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h", "Accelerate/Accelerate.h"]
NULLABILITY = re.compile(r"\b(_Nonnull|_Nullable|_Null_unspecified|__kindof|__strong|__autoreleasing)\b")
AVAILABLE = re.compile(r"\bmacos(?:x)?\s*\(\s*([0-9]+(?:\.[0-9]+)?)")


def _norm(spelling: str) -> str:
    s = NULLABILITY.sub("", spelling)
    s = re.sub(r"__attribute__\(\(\w+\)\)", "", s).replace("[]", "*")
    s = re.sub(r"\s+", " ", s).replace(" *", "*").replace("* ", "*").strip()
    return s


def _type(t) -> str:
    return _norm(t.get_canonical().spelling)


def _method_sig(c, cls: str) -> tuple:
    # instancetype is the receiving class: the same as naming the class
    result = f"{cls}*" if c.result_type.spelling == "instancetype" else _type(c.result_type)
    return (result, tuple(_type(a.type) for a in c.get_arguments()))


def _kind(cursor):
    """The cursor's kind; None for kinds newer than these Python bindings (the SDK has a few)."""
    try:
        return cursor.kind
    except ValueError:
        return None


_SOURCES: dict[str, str] = {}


def _introduced(cursor, before: bool = False) -> str | None:
    """The macOS version in the declaration's availability macro, if any (API_AVAILABLE(macos(13.0)),
    MPS_AVAILABLE_STARTING(macos(12.0), ...)). The macro follows a member's declarator, outside the
    cursor's extent: the text is read up to the declaration's ';'. `before`: a class's macro, on the
    line before its @interface."""
    name = cursor.extent.start.file.name
    text = _SOURCES.setdefault(name, Path(name).read_text(errors="replace"))
    start = cursor.extent.start.offset
    if before:
        start = text.rfind("\n", 0, text.rfind("\n", 0, start)) + 1
        end = text.find("\n", cursor.extent.start.offset)
    else:
        end = text.find(";", cursor.extent.end.offset)
    found = AVAILABLE.findall(text[start:end if end >= 0 else len(text)])
    return found[0] if found else None


class Api:
    """The declarations of one translation unit, or of the files under `only`."""

    def __init__(self, tu, only: Path | None = None):
        import clang.cindex as ci

        K = ci.CursorKind
        self.classes: dict[str, dict] = {}
        self.functions: dict[str, object] = {}
        self.enums: dict[str, int] = {}
        self.typedefs: dict[str, str] = {}
        self.where: dict[tuple, str] = {}
        containers = {K.OBJC_INTERFACE_DECL, K.OBJC_CATEGORY_DECL, K.OBJC_PROTOCOL_DECL}

        def mine(c) -> bool:
            return only is None or (c.location.file is not None and Path(c.location.file.name).parent == only)

        def walk(cursor):
            for c in cursor.get_children():
                if _kind(c) in containers:
                    if not mine(c):
                        continue
                    name = c.spelling
                    if _kind(c) == K.OBJC_CATEGORY_DECL:
                        name = next((x.spelling for x in c.get_children() if _kind(x) == K.OBJC_CLASS_REF), name)
                    entry = self.classes.setdefault(name, {"super": None, "protocols": set(), "members": {},
                                                           "cursor": None})
                    if _kind(c) != K.OBJC_CATEGORY_DECL and entry["cursor"] is None:
                        entry["cursor"] = c
                    for m in c.get_children():
                        if _kind(m) == K.OBJC_SUPER_CLASS_REF:
                            entry["super"] = m.spelling
                        elif _kind(m) == K.OBJC_PROTOCOL_REF:
                            entry["protocols"].add(m.spelling)
                        elif _kind(m) in (K.OBJC_INSTANCE_METHOD_DECL, K.OBJC_CLASS_METHOD_DECL):
                            key = ("+" if _kind(m) == K.OBJC_CLASS_METHOD_DECL else "-") + m.spelling
                            entry["members"][key] = m
                        elif _kind(m) == K.OBJC_PROPERTY_DECL:
                            entry["members"]["." + m.spelling] = m
                elif _kind(c) == K.FUNCTION_DECL and mine(c):
                    self.functions[c.spelling] = c
                elif _kind(c) == K.ENUM_DECL and mine(c):
                    for e in c.get_children():
                        if _kind(e) == K.ENUM_CONSTANT_DECL:
                            self.enums[e.spelling] = e.enum_value
                elif _kind(c) == K.TYPEDEF_DECL and mine(c):
                    self.typedefs[c.spelling] = _type(c.underlying_typedef_type)
                    for e in c.get_children():
                        if _kind(e) == K.ENUM_DECL:
                            for v in e.get_children():
                                if _kind(v) == K.ENUM_CONSTANT_DECL:
                                    self.enums[v.spelling] = v.enum_value
                elif _kind(c) in (K.LINKAGE_SPEC, K.UNEXPOSED_DECL):
                    walk(c)

        walk(tu.cursor)

    def find(self, cls: str, key: str, seen=None):
        """The member `key` of class or protocol `cls`, looked up as Objective-C does: the class (and
        its categories), its protocols, then its superclass."""
        seen = seen if seen is not None else set()
        if cls in seen or cls not in self.classes:
            return None
        seen.add(cls)
        entry = self.classes[cls]
        if key in entry["members"]:
            return entry["members"][key]
        for p in entry["protocols"]:
            hit = self.find(p, key, seen)
            if hit is not None:
                return hit
        return self.find(entry["super"], key, seen) if entry["super"] else None


def _parse(text: str, args: list[str]):
    import clang.cindex as ci

    tu = ci.Index.create().parse("check.mm", args=args, unsaved_files=[("check.mm", text)])
    errors = [str(d) for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    return tu, errors


def compare(sdk: Path, minimum: str, resource_dir: str) -> list[str]:
    """The problems found: [] when every declaration of ours matches the SDK."""
    common = ["-x", "objective-c++", "-std=c++17", "-fobjc-arc", "-resource-dir", resource_dir,
              f"--target=arm64-apple-macos{minimum}", "-isysroot", str(sdk)]
    ours_text = "".join(f'#include "{h.name}"\n' for h in sorted(DECLS.glob("*.h")))
    ours_tu, errs = _parse(ours_text, common + ["-DDARKNET_PY_APPLE_API_DECLS", "-I", str(DECLS)])
    if errs:
        return [f"our declarations do not parse: {e}" for e in errs]
    sdk_text = "".join(f"#import <{h}>\n" for h in SDK_IMPORTS)
    sdk_tu, errs = _parse(sdk_text, common)
    if errs:
        return [f"the SDK's headers do not parse: {e}" for e in errs[:10]]
    ours, theirs = Api(ours_tu, DECLS), Api(sdk_tu)
    problems, checked = [], 0
    floor = tuple(map(int, minimum.split(".")))

    def too_new(cursor, what: str):
        v = _introduced(cursor)
        if v and tuple(map(int, v.split("."))) > floor:
            problems.append(f"{what}: the SDK makes it available from macOS {v}, after our minimum {minimum}")

    for cls, entry in ours.classes.items():
        if cls not in theirs.classes:
            problems.append(f"{cls}: not in the SDK")
            continue
        if theirs.classes[cls]["cursor"] is not None:
            v = _introduced(theirs.classes[cls]["cursor"], before=True)
            if v and tuple(map(int, v.split("."))) > floor:
                problems.append(f"{cls}: the SDK makes it available from macOS {v}, after our minimum {minimum}")
        for key, mine in entry["members"].items():
            checked += 1
            what = f"{cls} {key}"
            if key.startswith("."):  # a property: the SDK may declare it as a property or as its getter
                hit = theirs.find(cls, key) or theirs.find(cls, "-" + key[1:])
                if hit is None:
                    problems.append(f"{what}: no such property or getter in the SDK")
                    continue
                t = _type(hit.type) if _kind(hit).name == "OBJC_PROPERTY_DECL" else _type(hit.result_type)
                if t != _type(mine.type):
                    problems.append(f"{what}: ours is {_type(mine.type)}, the SDK's {t}")
            else:
                hit = theirs.find(cls, key)
                if hit is None:
                    problems.append(f"{what}: no such method in the SDK")
                    continue
                if _method_sig(hit, cls) != _method_sig(mine, cls):
                    problems.append(f"{what}: ours is {_method_sig(mine, cls)}, the SDK's {_method_sig(hit, cls)}")
            too_new(hit, what)
    for name, mine in ours.functions.items():
        checked += 1
        hit = theirs.functions.get(name)
        if hit is None:
            problems.append(f"{name}(): not in the SDK")
        elif _type(hit.type) != _type(mine.type):
            problems.append(f"{name}(): ours is {_type(mine.type)}, the SDK's {_type(hit.type)}")
        else:
            too_new(hit, f"{name}()")
    for name, value in ours.enums.items():
        checked += 1
        if theirs.enums.get(name) != value:
            problems.append(f"{name}: ours is {value}, the SDK's {theirs.enums.get(name)}")
    for name, t in ours.typedefs.items():
        checked += 1
        if name in theirs.typedefs and theirs.typedefs[name] != t:
            problems.append(f"typedef {name}: ours is {t}, the SDK's {theirs.typedefs[name]}")
        elif name not in theirs.typedefs and name not in theirs.classes:
            problems.append(f"typedef {name}: not in the SDK")
    print(f"{sdk.name}: {checked} declarations of ours compared, {len(problems)} problems")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sdk", type=Path, help="an unpacked MacOSX*.sdk (tools/macos_sdk_check.py unpacks them)")
    ap.add_argument("--minimum", default="13.0", help="our minimum macOS (default: %(default)s)")
    ap.add_argument("--resource-dir", help="clang's resource directory, of an LLVM no newer than libclang's "
                                           "(default: the newest /usr/lib/llvm-N/lib/clang/N)")
    args = ap.parse_args()
    resource = args.resource_dir or str(sorted(Path("/usr/lib").glob("llvm-*/lib/clang/*/include"))[-1].parent)
    problems = compare(args.sdk, args.minimum, resource)
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
