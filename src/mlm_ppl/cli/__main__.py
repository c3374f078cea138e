"""``python -m mlm_ppl.cli``: the ``mlm-ppl`` command."""

from . import main

raise SystemExit(main())
