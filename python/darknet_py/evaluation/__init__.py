"""Measuring a model on labelled data as Darknet's `detector map` does: mAP and the `map` command
(evaluate), box IoU, the confusion matrix and per-image outcomes, the PR/F1 plots, and the images of
errors saved by --save-errors."""
