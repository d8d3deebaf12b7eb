"""Every error the cfg parser and network builder promise: DarknetError (a ValueError) whose message
names the file and the offending line and says what to do; unused options are warnings naming
file and line; missing files are FileNotFoundError naming the path."""
from __future__ import annotations

import struct
import warnings

import pytest

import darknet_py
from darknet_py import DarknetError, Network

NET = """[net]
width=32
height=32
channels=3
"""

CONV = """
[convolutional]
batch_normalize=1
filters={filters}
size=3
stride=1
pad=1
activation=leaky
"""


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line number of the nth line containing `needle`."""
    hits = [i + 1 for i, line in enumerate(text.split("\n")) if needle in line]
    assert len(hits) > nth, f"{needle!r} not in the test cfg"
    return hits[nth]


def build_error(tmp_path, text: str, name: str = "bad.cfg") -> tuple[str, str]:
    path = tmp_path / name
    path.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DarknetError) as e:
            Network(path)
    return str(e.value), str(path)


def assert_points_at(msg: str, path: str, line: int, *hints: str) -> None:
    assert f"{path}:{line}:" in msg, f"expected {path}:{line}: in the message, got: {msg}"
    for h in hints:
        assert h in msg, f"expected {h!r} in the message, got: {msg}"


def test_darknet_error_is_value_error():
    assert issubclass(DarknetError, ValueError)
    assert darknet_py.DarknetError is darknet_py._core.DarknetError


# ---- parser ------------------------------------------------------------------------------------


def test_unknown_section(tmp_path):
    text = NET + CONV.format(filters=8) + "\n[convolutionl]\nfilters=8\n"
    msg, path = build_error(tmp_path, text)
    # the hint lists what is supported, so the typo is easy to spot
    assert_points_at(msg, path, line_of(text, "[convolutionl]"), "unknown section [convolutionl]", "convolutional")


def test_malformed_line(tmp_path):
    text = NET + "\n[convolutional]\nfilters 8\nsize=3\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "filters 8"), "malformed line", "expected key=value")


def test_malformed_section_header(tmp_path):
    text = NET + "\n[convolutional\nfilters=8\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "[convolutional"), "malformed section header", "expected [name]")


def test_option_before_first_section(tmp_path):
    text = "# a comment\nwidth=32\n" + NET
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, 2, "before the first [section]", "[net]")


def test_first_section_must_be_net(tmp_path):
    text = CONV.format(filters=8)
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "[convolutional]"), "expected [net]")


def test_second_net_section(tmp_path):
    text = NET + CONV.format(filters=8) + "\n" + NET
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "[net]", 1), "second [net]")


@pytest.mark.parametrize("value", ["abc", "3x", "1e", "0x10", "1e3", "1,2", ""])  # atoi would read 0x10, 1e3 as 0, 1
def test_non_integer_value(tmp_path, value):
    text = NET + CONV.format(filters=value)
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "filters="), f"filters={value}", "not an integer")


@pytest.mark.parametrize("value", ["fast", "0.9.1", "nan", "1e999", ""])
def test_non_numeric_value(tmp_path, value):
    text = NET.replace("channels=3", f"channels=3\nmomentum={value}") + CONV.format(filters=8)
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "momentum="), "momentum=", "not a number")


def test_non_integer_in_list(tmp_path):
    text = NET + CONV.format(filters=8) + "\n[route]\nlayers=-1,x\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "layers="), "'x' is not an integer", "comma-separated")


@pytest.mark.parametrize("option, bad, expected_range", [
    ("filters", "-5", "1.."), ("filters", "0", "1.."), ("batch_normalize", "2", "0..1"), ("size", "0", "1.."),
    ("stride", "-1", "1.."), ("pad", "3", "0..1"), ("groups", "0", "1.."),
])
def test_out_of_range_value(tmp_path, option, bad, expected_range):
    kept = [line for line in CONV.format(filters=8).split("\n") if not line.startswith(option + "=")]
    text = NET + "\n".join(kept) + f"{option}={bad}\n"
    msg, path = build_error(tmp_path, text)
    # the hint is the allowed range
    assert_points_at(msg, path, line_of(text, f"{option}={bad}"), "out of range", f"(expected {expected_range}")


def test_out_of_range_net_option(tmp_path):
    text = NET.replace("width=32", "width=-32") + CONV.format(filters=8)
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "width=-32"), "[net]", "out of range", "(expected 1..")


def test_unknown_activation(tmp_path):
    text = NET + CONV.format(filters=8).replace("activation=leaky", "activation=leakyrelu")
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "activation="), "unknown activation 'leakyrelu'")
    # the message lists the known ones
    for name in ("linear", "leaky", "relu", "logistic", "mish", "swish", "normalize_channels"):
        assert name in msg


# ---- network builder -----------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["-3", "2", "7", "-1,5"])
def test_route_to_missing_layer(tmp_path, ref):
    # layers 0 and 1 exist; the route is layer 2: -3 is before the start, 2 is itself, 5 and 7 are later
    text = NET + CONV.format(filters=8) + CONV.format(filters=8) + f"\n[route]\nlayers={ref}\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "layers="), "does not exist", "layer")


@pytest.mark.parametrize("ref", ["-4", "2", "9"])
def test_shortcut_to_missing_layer(tmp_path, ref):
    text = NET + CONV.format(filters=8) + CONV.format(filters=8) + f"\n[shortcut]\nfrom={ref}\nactivation=linear\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "from="), "does not exist", "index 2")


def yolo_net(filters: int, mask: str = "0,1,2", num: int = 6, classes: int = 80) -> str:
    return (NET + CONV.format(filters=16) + "\n[convolutional]\nsize=1\nstride=1\npad=1\n"
            f"filters={filters}\nactivation=linear\n\n[yolo]\nmask = {mask}\n"
            "anchors = 10,14,  23,27,  37,58,  81,82,  135,169,  344,319\n"
            f"classes={classes}\nnum={num}\n")


def test_yolo_mask_index_out_of_range(tmp_path):
    text = yolo_net(255, mask="3,4,6")
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "mask ="), "mask index 6", "num=6", "0..5")


def test_yolo_filters_mismatch(tmp_path):
    text = yolo_net(256)
    msg, path = build_error(tmp_path, text)
    # points at the yolo layer's classes, names the conv's line, and says what filters should be
    assert_points_at(msg, path, line_of(text, "classes="), "256 channels", "(80 + 5) x 3", "filters=255",
                     f"line {line_of(text, 'filters=256') - 4}")


def test_yolo_filters_mismatch_follows_mask_length(tmp_path):
    text = yolo_net(3 * 85, mask="0,1")
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "classes="), "filters=170")


def test_yolo_heads_with_different_classes(tmp_path):
    # NMS compares class scores across heads: every head must have the same number of classes
    text = yolo_net(3 * 85) + "\n[route]\nlayers=-3\n" + \
        "\n[convolutional]\nsize=1\nstride=1\npad=1\nfilters=18\nactivation=linear\n\n[yolo]\nmask=3,4,5\n" \
        "anchors = 10,14,  23,27,  37,58,  81,82,  135,169,  344,319\nclasses=1\nnum=6\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "classes=1"), "classes=1", "80", "same number of classes")


def test_conv_groups_not_dividing_channels(tmp_path):
    text = NET + CONV.format(filters=16) + "\n[convolutional]\nfilters=16\nsize=3\ngroups=3\nactivation=leaky\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "groups=3"), "groups=3 does not divide the 16 input channels")


def test_route_groups_not_dividing_channels(tmp_path):
    text = NET + CONV.format(filters=10) + "\n[route]\nlayers=-1\ngroups=4\ngroup_id=1\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "groups=4"), "groups=4 does not divide the 10 channels")


def test_route_layers_with_different_sizes(tmp_path):
    text = NET + CONV.format(filters=8) + "\n[maxpool]\nsize=2\nstride=2\n" + "\n[route]\nlayers=-1,-2\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "layers="), "16x16", "32x32", "equal width and height")


def test_kernel_larger_than_input(tmp_path):
    text = NET.replace("width=32", "width=4").replace("height=32", "height=4") + \
        "\n[convolutional]\nfilters=4\nsize=7\nstride=1\nactivation=linear\n"
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "size=7"), "does not fit the 4x4 input")


def small(w=32, h=32, c=3):
    return NET.replace("width=32", f"width={w}").replace("height=32", f"height={h}").replace("channels=3", f"channels={c}")


@pytest.mark.parametrize("text, needle, nth", [
    (small(65536, 65536, 65536) + CONV.format(filters=8), "[net]", 0),
    (small() + "\n[convolutional]\nfilters=1048576\nsize=1024\npad=1\n", "filters=", 0),
    (small() + "\n[connected]\noutput=16777216\n", "output=", 0),
    (small() + "\n[upsample]\nstride=64\n" * 3, "stride=64", 1),  # 32 -> 2048 -> 131072 pixels wide
    (small(1, 65536, 1) + "\n[maxpool]\nmaxpool_depth=1\nout_channels=1048576\n", "[maxpool]", 0),
    (small(64, 64, 1) + "\n[convolutional]\nfilters=65536\nsize=1\n" + "\n[route]\nlayers=-1,-1,-1,-1,-1\n",
     "layers=", 0),
])
def test_absurd_sizes_are_refused_before_allocating(tmp_path, text, needle, nth):
    # A typo must not make the engine try to allocate terabytes: the builder refuses, naming the line.
    msg, path = build_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, needle, nth), "over the engine's limit", "floats")


# ---- whole files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n   \n", "# only a comment\n; and another\n"])
def test_empty_cfg(tmp_path, text):
    msg, path = build_error(tmp_path, text)
    assert path in msg and "no sections" in msg and "Darknet .cfg" in msg


def test_cfg_with_only_net(tmp_path):
    msg, path = build_error(tmp_path, NET)
    assert path in msg and "no layers" in msg


def test_binary_file_as_cfg(tmp_path):
    # what a .weights file starts with: three int32 version numbers and a uint64 count
    path = tmp_path / "yolo.weights"
    path.write_bytes(struct.pack("<3iQ", 0, 2, 5, 32013312) + bytes(range(256)) * 4)
    with pytest.raises(DarknetError) as e:
        Network(path)
    assert_points_at(str(e.value), str(path), 1, "binary data", ".weights")


def test_binary_after_valid_lines(tmp_path):
    path = tmp_path / "bad.cfg"
    path.write_bytes((NET + CONV.format(filters=8)).encode() + b"\x00\x01\x02garbage\n")
    with pytest.raises(DarknetError) as e:
        Network(path)
    assert_points_at(str(e.value), str(path), (NET + CONV.format(filters=8)).count("\n") + 1, "binary data")


def test_invalid_utf8_is_quoted_not_a_decode_error(tmp_path):
    # the message quotes the bad line; its invalid bytes are shown escaped, the error stays a DarknetError
    path = tmp_path / "bad.cfg"
    text = (NET + "\n[convolutional]\n").encode() + b"filters\xa3\xff\n"
    path.write_bytes(text)
    with pytest.raises(DarknetError) as e:
        Network(path)
    assert_points_at(str(e.value), str(path), text.count(b"\n"), "malformed line", "\\xa3")


# ---- warnings ------------------------------------------------------------------------------------


def test_unknown_options_are_warnings_with_file_and_line(tmp_path):
    text = NET + CONV.format(filters=8).replace("size=3", "size=3\nfliters=8") + "\n[maxpool]\nsize=2\nstride=2\nfoo=1\n"
    path = tmp_path / "warn.cfg"
    path.write_text(text)
    with pytest.warns(UserWarning) as record:
        net = Network(path)
    msgs = [str(w.message) for w in record]
    for key in ("fliters", "foo"):
        hits = [m for m in msgs if f"'{key}'" in m]
        assert hits, f"no warning for {key}: {msgs}"
        assert f"{path}:{line_of(text, key + '=')}:" in hits[0] and "not used" in hits[0]
    assert len(net.layers) == 2  # warnings do not stop the build


def test_repeated_option_warns_and_first_value_wins(tmp_path):
    # Darknet reads the first occurrence and reports the repeat as an unused field
    text = NET + CONV.format(filters=8).replace("size=3", "size=3\nfilters=4")
    path = tmp_path / "dup.cfg"
    path.write_text(text)
    with pytest.warns(UserWarning, match="repeats line") as record:
        net = Network(path)
    msg = next(str(w.message) for w in record if "repeats" in str(w.message))
    assert f"{path}:{line_of(text, 'filters=4')}:" in msg and f"line {line_of(text, 'filters=8')}" in msg
    assert net.layers[0]["output"][0] == 8


def test_known_options_do_not_warn(tmp_path):
    path = tmp_path / "ok.cfg"
    path.write_text(NET + CONV.format(filters=8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Network(path)


# ---- missing files -------------------------------------------------------------------------------


def test_missing_cfg_file(tmp_path):
    missing = tmp_path / "nope" / "yolov4.cfg"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        Network(missing)


def test_missing_weights_and_names(tmp_path):
    cfg = tmp_path / "ok.cfg"
    cfg.write_text(NET + CONV.format(filters=8))
    for kwargs, missing in [({"weights": tmp_path / "x.weights"}, "x.weights"),
                            ({"names": tmp_path / "coco.names"}, "coco.names")]:
        with pytest.raises(FileNotFoundError, match=missing):
            Network(cfg, **kwargs)


def test_weights_file_too_short_names_layer(tmp_path):
    cfg = tmp_path / "ok.cfg"
    cfg.write_text(NET + CONV.format(filters=8))
    w = tmp_path / "short.weights"
    w.write_bytes(struct.pack("<3iQ", 0, 2, 5, 0) + b"\0" * 40)
    with pytest.raises(DarknetError) as e:
        Network(cfg, weights=w)
    assert str(w) in str(e.value) and "layer 0" in str(e.value) and f"cfg line {line_of(NET + CONV, '[conv')}" in str(e.value)
