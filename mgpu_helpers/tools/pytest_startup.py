"""A pytest plugin that takes the two slowest imports out of every pytest process's start and end.

``make test`` starts one pytest process per worker and the notebook timing (``bench notebooks``) one per
notebook, so a fixed cost here is paid dozens of times. Loaded first, from ``addopts`` in pyproject.toml
(``-p mgpu_helpers.tools.pytest_startup``), before nbval's plugin imports nbformat:

- nbformat imports jsonschema, whose format checkers import ``rfc3987_syntax`` when it is installed (it comes
  with ``jsonschema[format-nongpl]``, which jupyter-events asks for); that import compiles an Earley grammar,
  about 2.7 s of CPU. Notebook validation never checks the ``iri`` format it serves, so the import is
  refused here (jsonschema then leaves that one format unchecked).
- Hypothesis's own pytest plugin imports all of Hypothesis at the end of every session (about 1.6 s), tests
  with ``@given`` or not; ``addopts`` leaves that plugin out (``-p no:hypothesispytest``): ``@given`` tests
  run the same without it.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)
