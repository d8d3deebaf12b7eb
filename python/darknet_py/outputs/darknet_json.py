"""Detections in Darknet's `detector test -out result.json` format, byte for byte as Darknet's
detection_to_json and test_detector write them: a list of images, each with its frame_id (from 1),
filename and objects (class_id, name, relative_coordinates centre x, y, width, height, confidence,
printed with C's %f). Images only, as Darknet's test: the frames of a video are not written."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

from .files import write_text


def _image_entry(frame_id: int, result: Dict[str, Any]) -> str:
    w, h = float(result["width"]), float(result["height"])
    objects = []
    for d in result["detections"]:
        x, y, bw, bh = d["box"]  # pixels, top-left corner
        objects.append(f'  {{"class_id":{d["class_id"]}, "name":"{d["class_name"]}", "relative_coordinates":'
                       f'{{"center_x":{(x + bw / 2) / w:f}, "center_y":{(y + bh / 2) / h:f}, "width":{bw / w:f}, '
                       f'"height":{bh / h:f}}}, "confidence":{d["confidence"]:f}}}')
    return (f'{{\n "frame_id":{frame_id}, \n "filename":"{result["image"]}", \n "objects": [ \n' +
            ", \n".join(objects) + "\n ] \n}")


def darknet_json(results: Sequence[Dict[str, Any]]) -> str:
    """The file's text for the Runner's results (their image entries, in order)."""
    images: List[Dict[str, Any]] = [r for r in results if "image" in r]
    return "[\n" + ", \n".join(_image_entry(i + 1, r) for i, r in enumerate(images)) + "\n]"


def write_darknet_json(path: str, results: Sequence[Dict[str, Any]]) -> None:
    """Writes darknet_json(results) atomically."""
    write_text(path, darknet_json(results))
