"""The test suite. Importing it (pytest does, before ``conftest.py``) lets Python cache
compiled modules even where ``PYTHONDONTWRITEBYTECODE`` is set: this package's own modules
(an editable install is never compiled by the installer), ``tests/support.py`` and pytest's
assertion-rewritten test modules. Otherwise every pytest worker and every test subprocess
compiles them again: collecting the everyday tier took 12.4 CPU-s a worker, 6.0 with the
cache (measured). The caches are ``__pycache__`` directories, ignored by git."""

import sys

sys.dont_write_bytecode = False
