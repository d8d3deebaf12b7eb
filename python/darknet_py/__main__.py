"""`python -m darknet_py ...`: the same as the `darknet_py` command."""
import sys

from .commands.cli import main

sys.exit(main())
