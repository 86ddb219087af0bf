"""The checkers' shared machinery, one module per job; this package re-exports what the checker modules use:
:mod:`.failure` (:class:`CheckFailed`, the unwritten stub), :mod:`.fill_in` (a stub falls back to the course's
version, a wrong answer stops), :mod:`.compare` (the answer against the reference, the usual mistakes named),
:mod:`.limits` (time limits on the learner's code), :mod:`.course_code` (the one rule that tells the course's own
code from the learner's), :mod:`.watch` (which ``torch.distributed`` calls the learner's code made), :mod:`.ranks`
(launching on ranks, a hang or an error in the learner's terms), :mod:`.problems` (the rank-launching exercises'
table shape)."""

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
from .ranks import (
    HANG_S,
    TRAIN_HANG_S,
    as_numpy,
    call_on_rank,
    hang_failure,
    launch,
    launch_check,
    rank_tensor,
    run_watched,
)
from .watch import COLLECTIVE_CALLS, DIST_CALLS, RECVS, SENDS, WatchedCalls, call_label, refuse_calls
