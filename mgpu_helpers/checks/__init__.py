"""Exercise checkers: run the reader's code on fresh random inputs, compare with a reference, explain.

Every ``check_xxx(fn)`` prints one ``通过：...`` line when ``fn`` is right, and otherwise raises
:class:`CheckFailed` (an ``AssertionError``) whose message says, in Chinese, what is wrong: which rank,
which element, what was expected and what came back. An exercise that is still the generated stub
(``raise NotImplementedError("练习：...")``) fails with a message that starts with
``这个练习还没有完成`` (:data:`NOT_DONE`), also when the stub raised inside a rank (``mh.RankError`` with
``exc_type == "NotImplementedError"``) or sits in a Numba kernel (which on a GPU cannot raise).

Exercises that involve ranks run the reader's function on several world sizes through
:func:`mgpu_helpers.run_ranks` (the function travels to the ranks by value); each rank builds its input
from the random values drawn here, so a failure names the rank and the element. Sizes are small: the
checks run in seconds on a CPU (Numba's simulator, gloo ranks) and unchanged on GPUs (NCCL ranks).

| notebook | checker | the reader writes |
| --- | --- | --- |
| 01 | :func:`cuda_model.try_thread_ids` (and ``try_work_and_idle``, ``try_launch_config``) | notebook 01's fill-ins: the thread map, the idle count, the launch arithmetic |
| ex01 | :func:`check_grid_2d` | ``grid_2d(rows, cols, block_x, block_y) -> (grid_x, grid_y)``: x along columns |
| ex01 | :func:`check_reverse_copy` | a Numba kernel ``(a, out, n)`` on int32: ``out[i] = a[n - 1 - i]`` |
| ex01 | :func:`check_add_into_grid_stride` | a Numba kernel ``(x, y, n)``: in-place grid-stride ``y += x``, each element once |
| ex01 | :func:`check_matrix_add` | a Numba kernel ``(a, b, c, rows, cols)``: 2D index + bounds check |
| 02 | :func:`check_blocks_per_sm` | ``blocks_per_sm(block, regs_per_thread, limits)``: the occupancy arithmetic |
| 02 | :func:`check_vec_add_two` | a Numba kernel ``(a, b, c, n)``: two elements per thread, coalesced, each once |
| ex02 | :func:`check_saxpy_cupy` | ``saxpy_cupy(alpha, x, y)``: a CuPy RawKernel, y in place (runs on a GPU; structure everywhere) |
| ex02 | :func:`check_max_regs` | ``max_regs_per_thread(block, min_blocks, limits)``: the register budget for k blocks |
| ex02 | :func:`check_one_wave_blocks` | the number of blocks in one wave on this machine (number first) |
| 03 | :func:`check_env_for` | ``env_for(rank, world_size, master_port, nproc_per_node=None, master_addr="127.0.0.1") -> dict`` of the six variables |
| 03 | :func:`check_init_for` | ``init_for(rank, world_size, method)``: the env:// and tcp:// init calls, the rank bound to ``cuda:LOCAL_RANK`` under NCCL |
| 04 | :func:`check_exchange` | ``exchange(send_buf, dst, recv_buf, src)``: one ring step, no deadlock |
| 04 | :func:`check_ring_pass` | ``ring_pass(token, steps=None)``: the ring built from exchange |
| ex03 | :func:`check_placement` | ``placement(rank, nproc_per_node, visible) -> (node, local_rank, gpu)`` |
| ex03 | :func:`check_join_and_sum` | ``join_and_sum(rank, world_size, x)``: a FileStore by hand, all_reduce, leave |
| ex04 | :func:`check_pass_right` | ``pass_right(rank, world_size, x)`` with ordered blocking send/recv only |
| ex04 | :func:`check_ring_sum` | ``ring_sum(rank, world_size, x)``: the sum on a two-way ring, world_size // 2 steps |
| ex05 | :func:`check_broadcast` | ``broadcast_p2p(rank, world_size, x, src)`` from send/recv |
| ex05 | :func:`check_all_gather` | ``all_gather_p2p(rank, world_size, x)`` from send/recv |
| ex05 | :func:`check_ring_all_reduce` | ``ring_all_reduce_left(rank, world_size, x)``: the ring turned round (sends counted) |
| ex05 | :func:`check_ring_bytes_guess` | number first: the bytes one rank sends, held against a count on ranks |
| ex05 | :func:`check_count_sent_bytes` | ``count_sent_bytes(rank, world_size, x)``: wrap the sends, count bytes |
| 05 | :func:`~mgpu_helpers.checks.collectives.try_ring_all_reduce` | the ring all-reduce ``fn(tensor)`` (sends counted) |
| 05 | :func:`~mgpu_helpers.checks.collectives.try_expected_outputs` | each rank's result of all_reduce, all_gather, reduce_scatter |
| 05 | :func:`~mgpu_helpers.checks.collectives.try_all_reduce_busbw` | ``all_reduce_busbw(nbytes, seconds, world_size)`` |
| 05 | :func:`~mgpu_helpers.checks.collectives.try_comm_share_speedup` | ``comm_share_speedup(before, after)`` |
| 06 | :func:`~mgpu_helpers.checks.sharding.try_contiguous_ranges` | ``contiguous_ranges(n_items, world_size)``: the split by count, uneven sizes |
| 06 | :func:`~mgpu_helpers.checks.sharding.try_per_rank_memory` | ``per_rank_memory(strategy, sizes, weights)``: each rank's memory by part |
| 07 | :func:`~mgpu_helpers.checks.semantics.try_bytes_each_rank_sends` | ``bytes_each_rank_sends(op, nbytes, world_size, rank)``, broadcast too |
| 07 | :func:`~mgpu_helpers.checks.semantics.try_all_gather_uneven` | ``all_gather_uneven(rank, world_size, x)`` on ranks |
| ex06 | :func:`check_shard_contiguous_by_cost` | ``shard_contiguous_by_cost(costs, world_size)``: order kept, balanced by cost |
| ex06 | :func:`check_rank_memory_fewest_gpus` | ``fewest_gpus(strategy, capacity, ...)``: the fewest GPUs, or None |
| ex07 | :func:`check_reduce_scatter_uneven` | ``reduce_scatter_uneven(rank, world_size, x, sizes)``: each rank keeps its part |
| ex07 | :func:`check_all_gather_uneven` | ``all_gather_uneven(rank, world_size, x)``: pieces of any length |
| ex07 | :func:`check_all_reduce_rs_ag` | ``all_reduce_rs_ag(rank, world_size, x)``: reduce-scatter + all-gather, calls traced |
| ex08 | :func:`check_allreduce_crossover_bytes` | ``allreduce_crossover_bytes(n, alpha, beta)``: latency term = bandwidth term |
| 08 | ``stragglers.try_ring_allreduce_seconds`` | notebook 08's fill-in: the ring all-reduce's alpha-beta cost |
| 08 | ``stragglers.try_straggler_from_collective`` | notebook 08's fill-in: the straggler from per-rank times inside the collective |
| ex08 | :func:`check_rebalance` | ``rebalance(shards, seconds)``: new shards from measured times |
| ex08 | :func:`check_wait_prediction` | ``predicted_wait_s()``: a number first, then measured on ranks |
| ex09 | :func:`check_data_parallel_step` | ``data_parallel_step(model, optimizer, x, y, world_size)`` on uneven shards |
| 09 | ``dataparallel.try_local_gradient`` | notebook 09's fill-in: step 2 on this rank's shard |
| 09 | ``dataparallel.try_weighted_average`` | notebook 09's fill-in: the whole-batch mean over uneven shards |
| 09 | ``dataparallel.try_nccl_arguments`` | notebook 09's fill-in: the seed's ``ncclAllReduce`` call as CuPy's six arguments |
| ex09 | :func:`check_data_parallel_step` | ``data_parallel_step(model, optimizer, x, y, world_size)`` |
| 10 | :func:`check_culprit` | ``culprit(dumps) -> (rank, seq, kind) or None``: the rank whose flight-recorder entries first differ |
| 10 | :func:`check_straggler_or_none` | ``straggler_or_none(collective_s, noise_s) -> rank or None``: a straggler, or a slow path |
| ex10 | :func:`check_find_mismatch` | ``find_mismatch(evidence) -> (rank, seq, name)`` from a hang's evidence |
| ex10 | :func:`check_predict_hang` | ``predict_hang(schedules) -> (seq, rank, name)`` before the ranks run (number first) |
| ex11 | :func:`check_speedup_prediction` | ``predicted_speedups() -> (uneven, balanced)``: a number first, measured on ranks |
| ex11 | :func:`check_find_straggler` | ``find_straggler(values) -> (rank, lost_s)`` from per-rank records |
| 12 | ``lab.try_rs_ag_busbw`` | notebook 12's fill-in: ``rs_ag_busbw(nbytes, seconds, world_size)``, the factor derived |
| 12 | :func:`check_conclusions` | the lab's conclusions from the learner's own run, with that run's margin |
| 12 | :func:`try_conclusions` | the same, returning ``(verdicts, what is still missing before the report)`` |
| ex12 | :func:`check_ownership_cyclic` | ``ownership_cyclic(rank, world_size, data)``: round-robin ownership |
| 12 | :func:`check_ownership_check` | ``ownership_check(rank, world_size, data) -> dict``: shard, local, all-reduce, verdict |
| ex12 | :func:`check_rs_ag_slowdown` | ``rs_ag_slowdown() -> float``: a number first, held against the recorded run |
| ex13 | :func:`check_accumulate_dp` | ``AccumulateDP``: gradient accumulation, no communication inside ``no_sync()`` |
| ex13 | :func:`check_step_seconds` | ``step_seconds(ready_s, comm_s)``: when the last bucket's all-reduce ends |
| 14 | ``fsdp.try_local_slices`` | notebook 14's fill-in: a rank's shard on a 1-D or 2-D mesh, against DTensor |
| 14 | ``fsdp.try_model_state_bytes`` | notebook 14's fill-in: the ZeRO paper's model-state bytes per rank |
| ex14 | :func:`check_cheapest_stage` | ``cheapest_stage(psi, world_size, capacity, k)``: the first ZeRO stage that fits |
| ex14 | :func:`check_shard_bytes` | ``shard_bytes(shapes, world_size, rank)``: FSDP2's parameter bytes on one rank |

Notebook 13's own fill-ins are checked by ``mh.checks.overlap.try_*`` (:mod:`mgpu_helpers.checks.overlap`).
"""

from mgpu_helpers.lazy import attach

# The public names of each module, reached as ``mh.checks.<name>`` (the modules themselves are reached too).
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
_attribute, __dir__, __all__ = attach(
    __name__,
    submodules=None,  # every module of this folder
    attributes={name: module for module, names in _PUBLIC.items() for name in names.split()},
)


def __getattr__(name: str):
    """``mh.checks.<name>``; an exercise's ``check_x`` runs with the course's models, widgets and checks refused to
    the learner's code, as a lesson's fill-in does (:func:`core.guarding_course_code`)."""
    obj = _attribute(name)
    if not name.startswith("check_") or not callable(obj):
        return obj
    import functools

    from mgpu_helpers.checks.core import guarding_course_code

    @functools.wraps(obj)
    def guarded(*args, **kwargs):
        with guarding_course_code(name.removeprefix("check_")):
            return obj(*args, **kwargs)

    # lazy_loader (0.5 and later) keeps what it resolved in this module's namespace, where the next lookup finds
    # it without calling this function: the guarded check replaces it there, or only the first call is guarded.
    globals()[name] = guarded
    return guarded
