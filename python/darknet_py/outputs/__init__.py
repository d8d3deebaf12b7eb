"""What detection writes: atomic file writes (files: a temporary name renamed when complete),
boxes and labels drawn on images (draw), and Darknet-style label files and crops (labels_crops)."""
