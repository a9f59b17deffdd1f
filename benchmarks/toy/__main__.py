"""``python -m flowrl.benchmarks.toy [options]`` = ``flowrl eval toy [options]``."""

import sys

from .cli import main

sys.exit(main())
