"""`python -m decoder_shell.cli`: the same `shell` command."""

import sys

from . import main

sys.exit(main())
