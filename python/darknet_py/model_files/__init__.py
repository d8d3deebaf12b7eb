"""Model files: finding cfgs (shipped or on disk) and names files (cfgfiles), editing cfgs
(cfg_edit, behind `cfg adapt`), computing anchors from a dataset (anchors), and the bundled demo model
(demo)."""
