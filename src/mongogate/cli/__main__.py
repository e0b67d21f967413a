"""`python -m mongogate.cli`."""

from __future__ import annotations

import sys

from mongogate.cli import main

sys.exit(main())
