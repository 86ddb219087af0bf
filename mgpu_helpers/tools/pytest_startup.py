"""A pytest plugin loaded first (``addopts``), before nbval's imports nbformat: a cost here is paid by every pytest
process, dozens per ``make test``.

nbformat imports jsonschema, whose format checkers import ``rfc3987_syntax`` when installed (jupyter-events asks
for it); that compiles an Earley grammar, about 2.7 s of CPU, for the ``iri`` format notebook validation never
checks, so the import is refused here. (``addopts`` also leaves out Hypothesis's plugin, which imports all of
Hypothesis at every session's end, 1.6 s; ``@given`` tests run the same without it.)
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)
