"""Training a network as Darknet's `detector train` does: the loop and the `train` command (train),
the learning-rate policies, Darknet's weight initialisation, start weights from another model, atomic
checkpoints, the loss chart, the quick-start dataset and model, and the hook that names training phases."""
