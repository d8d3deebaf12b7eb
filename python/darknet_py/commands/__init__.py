"""The `darknet_py` command line: the argument parser and subcommands (cli), argument types, the
progress line, the detect command's loop over images and videos (runner), and the `export` and `cfg`
subcommands. `python -m darknet_py` and the `darknet_py` script run commands.cli.main."""
