#!/usr/bin/env python3
"""Compile the whole macOS arm64 build against Apple's real SDK headers, on Linux.

Every translation unit of the extension (engine, NEON kernels, Accelerate GEMM, the Metal device's
C++ and Objective-C++, the bindings) goes through CMakeLists.txt's Apple branch with
cmake/toolchains/macos-arm64.cmake, clang and lld, once per SDK and deployment target, with
-Wunguarded-availability-new (an API newer than the deployment target, called without an
@available guard, is a warning). The module is then linked by ld64.lld against the SDK's .tbd
stubs, so every framework symbol we call must exist in the SDK. The report ends with one line per
configuration: errors and availability warnings, both of which must be 0.

The SDK comes from a snapshot of github:itsnebulalol/sdks (the search tool's `fetch`), commit
e9414e087753613edec33b4ff0319ed9d35199ec: macOS13.0.sdk (final 13.0, 22A372) and macOS14.0.sdk
(Xcode 15 beta 1). Only headers, .tbd stubs and SDKSettings are unpacked, into a folder outside the
repository (Apple's SDK license forbids redistributing them); `git archive` fails on that snapshot,
so the files are read with `git ls-tree` and `git cat-file --batch`.

    python tools/macos_sdk_check.py --sdk-repo /work/.mirror/itsnebulalol+sdks/repo

Our own declarations of that API (src-metal/apple_api_decls/, what CI compiles against) are compared
with each SDK too (tools/apple_decls_vs_sdk.py).

Needs zig (pip install ziglang: its clang 22 compiles, its llvm-ar archives), LLD's ld64.lld with
llvm-nm and clang's builtin headers (Debian: clang-16 lld-16 llvm-16), cmake, ninja, pybind11 and libclang
(pip, the test extra). Exit status 0 only when every configuration has 0 errors, 0 availability
warnings and a linked module.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import apple_decls_vs_sdk

REPO = Path(__file__).resolve().parents[1]
SDK_COMMIT = "e9414e087753613edec33b4ff0319ed9d35199ec"
# (SDK folder in the snapshot, its version); each is checked at every supported deployment target
# it can build for
SDKS = [("macOS13.0.sdk", (13, 0)), ("macOS14.0.sdk", (14, 0))]
# The supported deployment targets: the minimum (pyproject, CMake, README_GPU_APPLE_METAL.md) and
# the newest we call APIs of
TARGETS = ["13.0", "14.0"]
KEEP = re.compile(r"(\.h|\.hpp|\.tbd|\.modulemap|/SDKSettings\.(json|plist)|/c\+\+/v1/[^.]+)$")
# Frameworks whose .tbd the snapshot lacks: the link gets an empty stand-in with the framework's
# install name, so their symbols are left to dynamic lookup and listed by name in the report
STAND_INS = {"Foundation": "/System/Library/Frameworks/Foundation.framework/Versions/C/Foundation"}


def extract_sdk(repo: Path, name: str, dest: Path) -> Path:
    """Unpacks SDK `name`'s headers, .tbd stubs and settings (and its symlinks) from the snapshot."""
    # named as Xcode names it: clang tells the SDK's platform by the folder's name
    root = dest / name.replace("macOS", "MacOSX")
    done = root / ".extracted"
    if done.is_file() and done.read_text() == SDK_COMMIT:
        return root
    if root.exists():
        shutil.rmtree(root)
    git = ["git", f"--git-dir={repo}"]
    listing = subprocess.run(git + ["ls-tree", "-r", "-z", SDK_COMMIT, "--", name], capture_output=True,
                             check=True).stdout.decode().split("\0")
    blobs, links = [], []
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        if mode == "120000":
            links.append((sha, path))
        elif KEEP.search(path):
            blobs.append((sha, path))
    print(f"{name}: unpacking {len(blobs)} files and {len(links)} links into {root}", flush=True)
    missing = []
    cat = subprocess.Popen(git + ["cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for sha, path in blobs + links:
        cat.stdin.write(sha.encode() + b"\n")
        cat.stdin.flush()
        header = cat.stdout.readline().split()
        if header[1] == b"missing":  # the snapshot leaves out its largest files
            missing.append(path)
            continue
        data = cat.stdout.read(int(header[2]))
        cat.stdout.read(1)
        out = root / path.split("/", 1)[1]
        out.parent.mkdir(parents=True, exist_ok=True)
        if (sha, path) in links:
            if not out.is_symlink():
                out.symlink_to(data.decode())
        else:
            out.write_bytes(data)
    cat.stdin.close()
    cat.wait()
    if missing:
        print(f"{name}: {len(missing)} files absent from the snapshot, e.g. {missing[:3]}", flush=True)
    for name, install_name in STAND_INS.items():
        tbd = root / install_name.lstrip("/")
        tbd = tbd.with_name(tbd.name + ".tbd")
        if not tbd.exists():
            tbd.parent.mkdir(parents=True, exist_ok=True)
            tbd.write_text(f"--- !tapi-tbd\ntbd-version: 4\ntargets: [ arm64-macos ]\n"
                           f"install-name: '{install_name}'\n...\n")
    done.write_text(SDK_COMMIT)
    return root


def unbound_symbols(module: Path, nm: str) -> dict[str, list[str]]:
    """The module's undefined symbols that no .tbd of the SDK exports (left to dynamic lookup), by
    whose they are: Python's (the interpreter exports them), Foundation's (its .tbd is a stand-in),
    and any other, which would be a symbol missing from the SDK."""
    out = subprocess.run([nm, "-m", str(module)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[2] for line in out.splitlines() if "dynamically looked up" in line]
    kinds: dict[str, list[str]] = {"python": [], "foundation": [], "other": []}
    for n in names:
        if n.startswith(("_Py", "__Py")):
            kinds["python"].append(n)
        elif re.match(r"_(OBJC_(CLASS|METACLASS|EHTYPE)_\$_)?NS", n):
            kinds["foundation"].append(n)
        else:
            kinds["other"].append(n)
    return kinds


def toolchain(work: Path) -> dict[str, str]:
    """Wrappers in work/bin around zig's clang (22: the 14.0 SDK's headers need a clang newer than 16)
    and llvm-ar, and the path of an ld64.lld (LLD's Mach-O linker; zig's own does not read the SDK)."""
    try:
        import ziglang
    except ImportError:
        sys.exit("needs zig's clang: pip install ziglang")
    zdir = Path(ziglang.__file__).parent
    lld = shutil.which("ld64.lld") or next((str(p) for p in sorted(Path("/usr/lib").glob("llvm-*/bin/ld64.lld"))), None)
    llvm_bin = Path(lld).parent if lld else None
    if not lld or not (llvm_bin / "llvm-nm").is_file() or not (llvm_bin / "llvm-strip").is_file():
        sys.exit("needs LLD's Mach-O linker ld64.lld with llvm-nm and llvm-strip beside it "
                 "(Debian: apt-get install clang-16 lld-16 llvm-16)")
    bindir = work / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    tools = {"clang++": f'clang --driver-mode=g++ -resource-dir "{zdir / "lib"}"', "ar": "ar", "ranlib": "ranlib"}
    for name, command in tools.items():
        wrapper = bindir / name
        wrapper.write_text(f'#!/bin/sh\nexec "{zdir / "zig"}" {command} "$@"\n')
        wrapper.chmod(0o755)
    # the builtin headers of an LLVM no newer than pip's libclang, for the declaration comparison
    resource = sorted(llvm_bin.parent.glob("lib/clang/*/include"))
    if not resource:
        sys.exit(f"needs clang's builtin headers under {llvm_bin.parent}/lib/clang (Debian: clang-16)")
    return {name: str(bindir / name) for name in tools} | {
        "ld64.lld": lld, "llvm-nm": str(llvm_bin / "llvm-nm"), "llvm-strip": str(llvm_bin / "llvm-strip"),
        "resource-dir": str(resource[-1].parent)}


WARNINGS = "-Wunguarded-availability-new -Wunguarded-availability"
AVAILABILITY = re.compile(r"warning: .*\[-Wunguarded-availability(-new)?\]")
ERROR = re.compile(r"(^|\s)(fatal )?error: ")


def check(sdk: Path, target: str, tools: dict[str, str], work: Path, jobs: int) -> dict:
    build = work / "build" / f"{sdk.name}-{target}"
    build.mkdir(parents=True, exist_ok=True)
    import pybind11

    configure = [
        "cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja",
        f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'cmake/toolchains/macos-arm64.cmake'}",
        f"-DCMAKE_CXX_COMPILER={tools['clang++']}", f"-DCMAKE_OBJCXX_COMPILER={tools['clang++']}",
        f"-DCMAKE_AR={tools['ar']}", f"-DCMAKE_RANLIB={tools['ranlib']}",
        # -mlinker-version: tells clang the linker takes -platform_version
        f"-DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld={tools['ld64.lld']} -mlinker-version=907",
        f"-DCMAKE_STRIP={tools['llvm-strip']}",
        # pybind11's -flto would hand clang 22's bitcode to an older LLD
        "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF",
        f"-DPYTHON_MODULE_EXTENSION=.cpython-{sys.version_info[0]}{sys.version_info[1]}-darwin.so",
        f"-DCMAKE_OSX_SYSROOT={sdk}", f"-DCMAKE_OSX_DEPLOYMENT_TARGET={target}",
        f"-DCMAKE_CXX_FLAGS={WARNINGS}", f"-DCMAKE_OBJCXX_FLAGS={WARNINGS}",
        "-DDARKNET_PY_METAL=ON", "-DDARKNET_PY_MODULE=ON", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        # No macOS Python is at hand: the bindings compile against this Python's headers, whose only
        # platform-specific one, pyconfig.h, describes Linux (the module is linked, not loaded)
        f"-DPython_INCLUDE_DIR={sysconfig.get_paths()['include']}",
    ]
    log = []
    r = subprocess.run(configure, capture_output=True, text=True)
    log.append(r.stdout + r.stderr)
    if r.returncode != 0:
        print(r.stdout[-3000:] + r.stderr[-3000:])
        return {"config": f"{sdk.name} at {target}", "errors": 1, "availability": 0, "linked": False,
                "units": 0, "log": "".join(log)}
    # every unit, even after a failure (-k 0), from scratch so each warning is seen again
    subprocess.run(["ninja", "-C", str(build), "clean"], capture_output=True)
    r = subprocess.run(["ninja", "-C", str(build), "-k", "0", f"-j{jobs}"], capture_output=True, text=True)
    out = r.stdout + r.stderr
    log.append(out)
    modules = list(build.glob("_core*.so"))
    unbound = unbound_symbols(modules[0], tools["llvm-nm"]) if modules else {"other": []}
    return {
        "unbound": unbound,
        "config": f"{sdk.name} at {target}",
        "units": len(re.findall(r"Building (?:CXX|OBJCXX) object", out)),
        "errors": len([line for line in out.splitlines() if ERROR.search(line)]) + (r.returncode != 0 and
                                                                                 not ERROR.search(out)),
        "availability": len(AVAILABILITY.findall(out)),
        "linked": bool(modules) and r.returncode == 0 and not unbound["other"],
        "module": str(modules[0]) if modules else None,
        "log": "".join(log),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sdk-repo", type=Path, default=Path("/work/.mirror/itsnebulalol+sdks/repo"),
                    help="the snapshot's git directory (default: %(default)s)")
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "darknet_py-macos-sdk",
                    help="where the SDK headers are unpacked and the builds go, outside the repository "
                         "(default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--log", action="store_true", help="print every compiler message, not only the summary")
    args = ap.parse_args()
    if not (args.sdk_repo / "objects").exists() and not (args.sdk_repo / "HEAD").is_file():
        sys.exit(f"{args.sdk_repo}: not a git directory: fetch github:itsnebulalol/sdks first")
    work = args.work.resolve()
    if work == REPO or REPO in work.parents:
        sys.exit(f"{work}: inside the repository; Apple's headers must stay outside it")
    for tool in ("cmake", "ninja", "git"):
        if not shutil.which(tool):
            sys.exit(f"needs {tool} on PATH")
    tools = toolchain(work)
    results, decl_problems = [], []
    for name, version in SDKS:
        sdk = extract_sdk(args.sdk_repo, name, work / "sdk")
        problems = apple_decls_vs_sdk.compare(sdk, TARGETS[0], tools["resource-dir"])
        decl_problems += [f"{sdk.name}: {p}" for p in problems]
        for target in TARGETS:
            if tuple(map(int, target.split("."))) > version:
                continue
            t0 = time.perf_counter()
            res = check(sdk, target, tools, work, args.jobs)
            res["seconds"] = time.perf_counter() - t0
            results.append(res)
            if args.log or res["errors"] or res["availability"] or not res["linked"]:
                shown = [line for line in res["log"].splitlines()
                         if "error" in line or "warning" in line or "note:" in line or args.log]
                print("\n".join(shown[:400]))
    print(f"\n{'configuration':24} {'units':>5} {'errors':>6} {'availability':>12}  module")
    for r in results:
        u = r.get("unbound", {})
        print(f"{r['config']:24} {r['units']:>5} {r['errors']:>6} {r['availability']:>12}  "
              f"{'linked' if r['linked'] else 'NOT linked'} ({r['seconds']:.0f} s); left to dynamic lookup: "
              f"{len(u.get('python', []))} Python, {len(u.get('foundation', []))} Foundation, "
              f"{len(u.get('other', []))} other {u.get('other', [])[:10]}")
    foundation = sorted({n for r in results for n in r.get("unbound", {}).get("foundation", [])})
    if foundation:
        print(f"Foundation symbols (no .tbd in the snapshot to bind them): {' '.join(foundation)}")
    print(f"our declarations of the Apple API (src-metal/apple_api_decls/) against the SDKs: "
          f"{len(decl_problems)} problems")
    for p in decl_problems:
        print("  " + p)
    ok = all(r["errors"] == 0 and r["availability"] == 0 and r["linked"] for r in results) and not decl_problems
    print("all clean" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
