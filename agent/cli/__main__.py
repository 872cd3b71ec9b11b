"""``python -m agent.cli`` (and ``accelerate launch -m agent.cli train ...``): the ``agent`` command."""

import sys

from agent.cli import main

sys.exit(main())
