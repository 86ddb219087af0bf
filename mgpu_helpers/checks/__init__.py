"""Exercise checkers: each ``check_xxx(fn)`` runs the reader's code on fresh random inputs and prints one ``通过：...``
line, or raises :class:`CheckFailed` saying in Chinese what is wrong (a stub still unwritten: :data:`NOT_DONE`).
Sizes are small: the checks run in seconds on a CPU (Numba's simulator, gloo ranks) and unchanged on GPUs. Each
module is one area and says which notebooks it checks."""

from mgpu_helpers.lazy import attach

# The public names of each module, reached as ``mh.checks.<name>`` (the modules themselves too).
_PUBLIC = {
    "core": "CheckFailed fill_in NOT_DONE RankProblem run_problem show_trace",
    "overlap": "check_accumulate_dp check_step_seconds",
    "fsdp": "check_local_slices check_model_state_bytes check_cheapest_stage check_shard_bytes",
    "cuda_model": "check_grid_2d check_reverse_copy check_add_into_grid_stride",
    "kernels": "check_matrix_add",
    "occupancy": "check_saxpy_cupy check_blocks_per_sm check_vec_add_two check_max_regs check_one_wave_blocks "
    "one_wave_facts",
    "groups": "check_env_for check_init_for check_placement check_join_and_sum",
    "p2p": "check_exchange check_ring_pass check_pass_right check_ring_sum",
    "collectives": "check_broadcast check_all_gather check_ring_all_reduce check_count_sent_bytes "
    "check_ring_bytes_guess check_ring_all_reduce_right try_ring_all_reduce check_expected_outputs "
    "try_expected_outputs check_all_reduce_busbw try_all_reduce_busbw check_comm_share_speedup "
    "try_comm_share_speedup check_first_out_of_step try_first_out_of_step",
    "semantics": "check_all_gather_uneven check_all_reduce_rs_ag check_reduce_scatter_uneven "
    "check_bytes_each_rank_sends",
    "sharding": "MEMORY_STRATEGIES check_shard_contiguous_by_cost check_rank_memory_fewest_gpus "
    "check_contiguous_ranges check_per_rank_memory",
    "stragglers": "check_ring_allreduce_seconds best_rebalance check_rebalance check_wait_prediction "
    "check_allreduce_crossover_bytes check_straggler_from_collective",
    "dataparallel": "check_data_parallel_step",
    "diagnostics": "HANG_OPS make_hang_evidence check_find_mismatch check_predict_hang check_culprit make_flight_dumps "
    "check_straggler_or_none",
    "review": "check_speedup_prediction check_find_straggler",
    "lab": "check_ownership_check check_rs_ag_slowdown check_rs_ag_busbw check_conclusions try_conclusions "
    "check_ownership_cyclic",
}
_NAMES = {name: module for module, names in _PUBLIC.items() for name in names.split()}
_attribute, __dir__, __all__ = attach(__name__, submodules=None, attributes=_NAMES)  # submodules: every module here


def __getattr__(name: str):
    """``mh.checks.<name>``; an exercise's ``check_x`` runs with the course's models, widgets and checks refused to
    the learner's code, as a lesson's fill-in does (:func:`core.course_code.refusing`)."""
    obj = _attribute(name)
    if not name.startswith("check_") or not callable(obj):
        return obj
    import functools

    from mgpu_helpers.checks.core import refusing

    @functools.wraps(obj)
    def guarded(*args, **kwargs):
        with refusing(name.removeprefix("check_")):
            return obj(*args, **kwargs)

    # lazy_loader (0.5 and later) keeps what it resolved in this module's namespace, where the next lookup finds
    # it without calling this function: the guarded check replaces it there, or only the first call is guarded.
    globals()[name] = guarded
    return guarded
