"""Training data in Darknet's formats: .data files, image lists, labels, augmentation, batches; and
`darknet_py synth`'s synthetic datasets of coloured shapes (synth, not imported here).

    from darknet_py.data import BatchLoader, augment_options_from_cfg, random_network_size
"""
from .augment import DEFAULT_OPTIONS, augment_options_from_cfg, no_augmentation, random_network_size
from .darknet_files import (DataFile, DataFileError, label_path_for, read_data_file, read_image_list,
                            read_names_file, replace_image_to_label)
from .labels import DataReporter, DataWarning, darknet_truth, dense_truth, read_labels
from .loader import BatchLoader

__all__ = [
    "BatchLoader", "DEFAULT_OPTIONS", "DataFile", "DataFileError", "DataReporter", "DataWarning",
    "augment_options_from_cfg", "darknet_truth", "dense_truth", "label_path_for", "no_augmentation",
    "random_network_size", "read_data_file", "read_image_list", "read_labels", "read_names_file",
    "replace_image_to_label",
]
