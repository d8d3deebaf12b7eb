"""Option types shared by the CLI's subcommands, so that their messages agree."""
import argparse


def unit_interval(text: str) -> float:
    """A number in [0, 1): thresholds, fractions."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {v}")
    return v


def fraction(text: str) -> float:
    """A number in [0, 1]: shares of a whole, where all of it is allowed."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {v}")
    return v


def positive_int(text: str) -> int:
    """An integer >= 1: counts, threads, iterations."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def positive_float(text: str) -> float:
    """A number > 0: timeouts, durations."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return v


def gigabytes_or_auto(text: str) -> "int | str":
    """A size in GB (0 or more; fractions welcome) as bytes, or "auto": memory budgets."""
    if text == "auto":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GB or 'auto': {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more GB, got {text}")
    return int(v * 2 ** 30)


def non_negative_int(text: str) -> int:
    """An integer >= 0: retries, where 0 means none."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {v}")
    return v


def size_wxh(text: str) -> tuple:
    """An image size as WIDTHxHEIGHT (or one number for a square), each at least 1: (width, height)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        w, h = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
        if len(parts) > 2:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT (e.g. 416x416), got {text!r}") from None
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"width and height must be at least 1, got {text!r}")
    return (w, h)


def add_allow_partial_option(p: argparse.ArgumentParser) -> None:
    """--allow-partial: load a weights file that does not fit its cfg (floats missing or left over)."""
    p.add_argument("--allow-partial", action="store_true",
                   help="load a weights file that does not fit the cfg (floats missing or left over: the layers\n"
                        "it holds completely), with a warning instead of the error")
