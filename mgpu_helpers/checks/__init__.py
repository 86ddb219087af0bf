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
| ex01 | :func:`check_launch_shape` | ``launch_shape(n, block) -> (blocks, idle)`` |
| ex01 | :func:`check_vec_add` | a Numba kernel ``(a, b, c, n)``: global index + bounds check |
| ex01 | :func:`check_matrix_add` | a Numba kernel ``(a, b, c, rows, cols)``: 2D index + bounds check |
| ex01 | :func:`check_grid_stride_add` | a Numba kernel ``(a, b, c, n)``: grid-stride loop |
| ex02 | :func:`check_saxpy_cupy` | ``saxpy_cupy(alpha, x, y)`` with a CuPy RawKernel (needs a GPU; says so without) |
| ex02 | :func:`check_blocks_per_sm` | ``blocks_per_sm(block, regs_per_thread, limits)``: the occupancy arithmetic |
| ex02 | :func:`check_one_wave_blocks` | the number of blocks in one wave on this machine (number first) |
| ex03 | :func:`check_placement` | ``placement(rank, nproc_per_node, visible) -> (node, local_rank, gpu)`` |
| ex03 | :func:`check_join_and_sum` | ``join_and_sum(rank, world_size, x)``: env:// by hand, all_reduce, leave |
| ex04 | :func:`check_pass_right` | ``pass_right(rank, world_size, x)`` with ordered blocking send/recv |
| ex04 | :func:`check_ring_sum` | ``ring_sum(rank, world_size, x)``: the sum by passing round the ring |
| ex05 | :func:`check_broadcast` | ``broadcast_p2p(rank, world_size, x, src)`` from send/recv |
| ex05 | :func:`check_all_gather` | ``all_gather_p2p(rank, world_size, x)`` from send/recv |
| ex05 | :func:`check_ring_all_reduce` | ``ring_all_reduce(rank, world_size, x)``: reduce-scatter + all-gather ring |
| ex05 | :func:`check_ring_bytes_guess` | number first: the bytes one rank sends, held against a count on ranks |
| ex05 | :func:`check_count_sent_bytes` | ``count_sent_bytes(rank, world_size, x)``: wrap the sends, count bytes |
| ex06 | :func:`check_shard_by_cost` | ``shard_by_cost(costs, rank, world_size)`` (property-tested) |
| ex06 | :func:`check_rank_memory` | ``rank_memory(strategy, n, params, grads, optimizer, activations)`` |
| ex07 | :func:`check_all_gather_uneven` | ``all_gather_uneven(rank, world_size, x)``: pieces of any length |
| ex07 | :func:`check_all_reduce_rs_ag` | ``all_reduce_rs_ag(rank, world_size, x)``: reduce-scatter + all-gather |
| ex07 | :func:`check_bytes_sent` | ``bytes_each_rank_sends(op, nbytes, world_size, rank)``: a number, then counted |
| ex08 | :func:`check_ring_allreduce_seconds` | the alpha-beta cost of a ring all-reduce |
| ex08 | :func:`check_rebalance` | ``rebalance(shards, seconds)``: new shards from measured times |
| ex08 | :func:`check_wait_prediction` | ``predicted_wait_s()``: a number first, then measured on ranks |
| ex09 | :func:`check_data_parallel_step` | ``data_parallel_step(model, optimizer, x, y, world_size)`` |
| 10 | :func:`check_stuck_in` | ``stuck_in(lines) -> (seq, name) or None``: the collective a rank entered, not finished |
| 10 | :func:`check_measured_speedup` | ``measured_speedup(one_rank_s, per_rank_step_s)``: the slowest rank sets the step |
| 10 | :func:`check_least_waiting` | ``least_waiting(collective_s) -> rank``: the shortest collective, by the median |
| ex10 | :func:`check_find_mismatch` | ``find_mismatch(evidence) -> (rank, seq, name)`` from a hang's evidence |
| ex10 | :func:`check_predict_hang` | ``predict_hang(schedules) -> (seq, rank, name)`` before the ranks run (number first) |
| ex11 | :func:`check_speedup_efficiency` | ``speedup_and_efficiency(t1_s, tn_s, world_size) -> (speedup, efficiency)`` |
| ex11 | :func:`check_speedup_prediction` | ``predicted_speedups() -> (uneven, balanced)``: a number first, measured on ranks |
| ex11 | :func:`check_find_straggler` | ``find_straggler(values) -> (rank, lost_s)`` from per-rank records |
| 12 | :func:`check_bus_bandwidth` | ``bus_bandwidth(op, nbytes, seconds, world_size) -> (algbw, busbw)`` (nccl-tests) |
| 12 | :func:`check_conclusions` | the lab's conclusions from the learner's own run, with that run's margin |
| ex12 | :func:`check_ownership_cyclic` | ``ownership_cyclic(rank, world_size, data)``: round-robin ownership |
| ex12 | :func:`check_crossover_size` | ``crossover_size(compute_us, table)``: read from the recorded 2 x H200 table |
| 12 | :func:`check_ownership_check` | ``ownership_check(rank, world_size, data) -> dict``: shard, local, all-reduce, verdict |
| - | :func:`check_lab_claims` | ``lab_claims(step_rows, sweep_rows) -> claims``: reading step and sweep rows (no notebook uses it now) |
| ex12 | :func:`check_rs_ag_slowdown` | ``rs_ag_slowdown() -> float``: a number first, held against the recorded run |
"""
from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(
    __name__,
    submodules=None,  # every module of this folder
    attributes={
        "CheckFailed": "core",
        "fill_in": "core",
        "NOT_DONE": "core",
        "check_launch_shape": "kernels",
        "PAD": "kernels",
        "check_vec_add": "kernels",
        "check_grid_stride_add": "kernels",
        "check_matrix_add": "kernels",
        "check_saxpy_cupy": "kernels",
        "check_blocks_per_sm": "kernels",
        "check_one_wave_blocks": "kernels",
        "one_wave_facts": "kernels",
        "RankProblem": "core",
        "run_problem": "core",
        "check_placement": "groups",
        "check_join_and_sum": "groups",
        "check_pass_right": "p2p",
        "check_ring_sum": "p2p",
        "check_broadcast": "collectives",
        "check_all_gather": "collectives",
        "check_ring_all_reduce": "collectives",
        "check_count_sent_bytes": "collectives",
        "check_ring_bytes_guess": "collectives",
        "check_all_gather_uneven": "semantics",
        "check_all_reduce_rs_ag": "semantics",
        "check_bytes_sent": "semantics",
        "check_shard_by_cost": "sharding",
        "MEMORY_STRATEGIES": "sharding",
        "check_rank_memory": "sharding",
        "check_ring_allreduce_seconds": "stragglers",
        "best_rebalance": "stragglers",
        "check_rebalance": "stragglers",
        "check_wait_prediction": "stragglers",
        "check_data_parallel_step": "dataparallel",
        "COLLECTIVES": "diagnostics",
        "make_hang_evidence": "diagnostics",
        "check_find_mismatch": "diagnostics",
        "check_predict_hang": "diagnostics",
        "check_stuck_in": "diagnostics",
        "check_measured_speedup": "diagnostics",
        "check_least_waiting": "diagnostics",
        "check_speedup_efficiency": "review",
        "check_speedup_prediction": "review",
        "check_find_straggler": "review",
        "check_ownership_check": "lab",
        "check_lab_claims": "lab",
        "check_rs_ag_slowdown": "lab",
        "check_bus_bandwidth": "lab",
        "check_conclusions": "lab",
        "check_ownership_cyclic": "lab",
        "check_crossover_size": "lab",
    },
)
