"""The checkers' shared machinery, one module per job; this package re-exports what the checker modules use.

- :mod:`.failure`: :class:`CheckFailed` (shown in a notebook as its message alone) and the unwritten stub;
- :mod:`.fill_in`: the fill-in protocol: a stub falls back to the course's version, a wrong answer stops;
- :mod:`.compare`: the learner's answer against the reference, the usual mistakes named;
- :mod:`.limits`: every call of the learner's answer under a time limit (SIGALRM, nesting safely);
- :mod:`.course_code`: the one rule that tells the course's own code from the learner's;
- :mod:`.watch`: which ``torch.distributed`` calls the learner's code made, under any name (code swapping);
- :mod:`.ranks`: launching on ranks: a hang reported after :data:`HANG_S` seconds with where each rank waits,
  an error naming the rank and the mistake;
- :mod:`.problems`: the table shape of the rank-launching exercises (:class:`RankProblem`, :func:`run_problem`).
"""

# The imports below are this package's re-exports (what the checker modules import from it), not unused names.
# ruff: noqa: F401

from .compare import (
    compare,
    expect_items,
    fail_first,
    first_hint,
    int_values,
    is_number,
    is_rank_number,
    matching_hint,
    new_rng,
    number_answer,
    which_rank,
)
from .course_code import (
    COURSE_PACKAGES,
    code_names,
    course_code_reached,
    course_object,
    refuse_course_code,
    refusing,
    resolve_course,
)
from .failure import (
    NOT_DONE,
    CheckFailed,
    _code_objects,
    _inner,
    has_stub,
    is_stub_error,
    not_done,
    require_written,
    show_trace,
)
from .fill_in import fill_in, fill_in_cell, passed
from .limits import answers, call, deadline
from .problems import WORLD_SIZES, RankProblem, run_problem
from .ranks import HANG_S, TRAIN_HANG_S, as_numpy, hang_failure, launch, launch_check, rank_tensor
from .watch import COLLECTIVE_CALLS, DIST_CALLS, RECVS, SENDS, WatchedCalls, call_label, refuse_calls
