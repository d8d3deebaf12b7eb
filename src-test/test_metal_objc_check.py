"""The Metal device's Objective-C++ file compiles (syntax and types) on Linux, against declarations of
the Apple API it uses (src-metal/apple_api_decls), and planted mistakes make the check fail."""
import os
import sys

import pytest

pytest.importorskip("clang.cindex", reason='libclang missing: pip install ".[test]" brings it')

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src-metal"))
import check_objc_syntax as check  # noqa: E402

with open(check.SOURCE) as f:
    TEXT = f.read()


def test_metal_objc_passes_the_syntax_check():
    assert check.errors() == []


@pytest.mark.parametrize("good, bad, what", [
    ("[enc dispatchThreadgroups:", "[enc dispatchThreadGroups:", "dispatchThreadGroups"),  # misspelt selector
    ("[enc setBytes:b.bytes length:b.size atIndex:b.index]",
     "[enc setBytes:b.bytes length:b.size atIndex:mtl(b.buffer)]", "NSUInteger"),  # a buffer where an index goes
    ("options.fastMathEnabled = NO;", "options.fastMathEnable = NO;", "fastMathEnable"),  # misspelt property
    ("str([e name])", "str([e exceptionName])", "exceptionName"),  # NSException has -name and -reason only
    ("dataType:MPSDataTypeFloat32];\n        return [[MPSMatrix alloc]",
     "dataType:MPSDataTypeFloat32];\n        return [[MPSMatrix alloc] initWithBuffer:m.buffer offset:0 descriptor:d]; (void)",
     "MetalBuffer"),  # a C++ handle where an id<MTLBuffer> goes
])
def test_planted_errors_fail_the_check(good, bad, what):
    assert good in TEXT, "the test's anchor text moved: update it"
    found = check.errors(text=TEXT.replace(good, bad, 1))
    assert found, "a planted error passed the check: " + bad
    assert any(what in e for e in found), found
