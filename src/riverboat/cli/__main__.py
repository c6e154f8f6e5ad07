"""``python -m riverboat.cli``: the same as the ``riverboat`` console script."""

from riverboat.cli import main

raise SystemExit(main())
