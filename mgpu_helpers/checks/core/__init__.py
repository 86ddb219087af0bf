"""The checkers' shared machinery, one module a job, re-exported here: :mod:`.failure` (a failed or unwritten check),
:mod:`.fill_in`, :mod:`.compare` (answer against reference), :mod:`.limits` (time limits), :mod:`.course_code` (the
course's code is no answer), :mod:`.watch` (the ``torch.distributed`` calls made), :mod:`.ranks` (launching on
ranks), :mod:`.problems` (the rank exercises' table)."""

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
from .course_code import COURSE_PACKAGES, code_names, course_code_reached, course_object, refuse_course_code, refusing
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
from .ranks import HANG_S, TRAIN_HANG_S, as_numpy, hang_failure, launch, launch_check, rank_tensor, run_watched
from .watch import COLLECTIVE_CALLS, DIST_CALLS, RECVS, SENDS, WatchedCalls, call_label, refuse_calls
