"""SAHI (obss/sahi, MIT: sliced inference) driving our Network, so that compare_tiling.py can set
SAHI's slicing and merging beside ours with the same model on the same images. A benchmark peer,
not a dependency: `pip install sahi` (its core needs no torch).

SAHI hands each slice to a DetectionModel: DarknetSahiModel runs Network.detect on it (or
Network.detect_batch on a batch of slices, when get_sliced_prediction's batch_size > 1) and gives
the boxes back as SAHI's ObjectPredictions, which SAHI shifts into the image and merges (its
GREEDYNMM over IOS by default)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np
from sahi.models.base import DetectionModel
from sahi.prediction import ObjectPrediction


class DarknetSahiModel(DetectionModel):
    """model: a darknet_py.Network. confidence_threshold: the detection threshold; nms: Network's NMS."""

    def __init__(self, model, confidence_threshold: float = 0.25, nms: float = 0.45) -> None:
        self.nms = nms
        names = list(model.names) or [str(i) for i in range(model.classes)]
        super().__init__(model=model, confidence_threshold=confidence_threshold, device="cpu",
                         category_mapping={str(i): n for i, n in enumerate(names)})

    def set_model(self, model, **kwargs) -> None:
        self.model = model

    def perform_inference(self, image: np.ndarray) -> None:
        self._original_predictions = [self.model.detect(image, thresh=self.confidence_threshold, nms=self.nms)]

    def perform_batch_inference(self, images: List[np.ndarray]) -> None:
        """All slices of a batch in one forward pass (Network.detect_batch)."""
        self._original_predictions = self.model.detect_batch(images, thresh=self.confidence_threshold, nms=self.nms)
        self._batch_images = None

    def _create_object_prediction_list_from_original_predictions(self, shift_amount_list: Optional[list] = None,
                                                                 full_shape_list: Optional[list] = None) -> None:
        shifts = shift_amount_list or [[0, 0]]
        if shifts and not isinstance(shifts[0], (list, tuple)):
            shifts = [shifts]
        shapes = full_shape_list
        if shapes and not isinstance(shapes[0], (list, tuple)):
            shapes = [shapes]
        per_image = []
        for k, dets in enumerate(self._original_predictions):
            shift = list(shifts[k]) if k < len(shifts) else [0, 0]
            shape = list(shapes[k]) if shapes and k < len(shapes) else None
            per_image.append([ObjectPrediction(bbox=[d.x, d.y, d.x + d.w, d.y + d.h], category_id=d.class_id,
                                               category_name=d.class_name, score=d.confidence,
                                               shift_amount=shift, full_shape=shape) for d in dets])
        self._object_prediction_list_per_image = per_image

    @property
    def num_categories(self) -> int:
        return len(self.category_mapping)

    @property
    def has_mask(self) -> bool:
        return False
