"""`python -m darknet_py ...`: the same as the `darknet_py` command."""
import sys

from .cli import main

sys.exit(main())
