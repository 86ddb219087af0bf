"""Exercises generated from solutions, checked both ways (nbgrader's validate and validate --invert).

- the generator turns solution regions into stubs that say how much to write, and tags the cells that use them;
- the committed exercises are exactly what regenerating writes;
- every checker passes the solution function (taken from the solution notebook's own cells) and fails the
  generated stub with the "not done yet" message;
- a subtly wrong answer is named precisely (which rank, which element).
"""

import ast
import glob
import os
import re
import shutil
import statistics
import textwrap

import nbformat
import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)  # before numba is imported: the CUDA simulator in CPU mode

from mgpu_helpers import checks  # noqa: E402
from mgpu_helpers.tools import exercises  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK_CALL = re.compile(r"checks\.(check_\w+)\((\w+)")


# --------------------------------------------------------------------------------------------------------
# Reading the solution notebooks: which function each checker is given, and the cells that define it.


def _is_setup_cell(source: str) -> bool:
    """Imports, or ``env = mh.setup()``: what a definition cell needs before it runs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and "mh.setup(" in ast.unparse(node.value):
            continue
        return False
    return bool(tree.body)


def _exercise_pairs():
    """(notebook, checker name, function name) for every check cell of every solution notebook."""
    pairs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "solutions", "ex*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                for checker, fn in CHECK_CALL.findall(cell.source):
                    pairs.append((os.path.basename(path), checker, fn))
    return pairs


def _namespace(notebook: str, stub: bool) -> dict:
    """Run a solution notebook's set-up and definition cells (stubbed when ``stub``) in a fresh namespace.

    The namespace's module name is not importable, so the functions travel to the ranks by value, as
    they do from a notebook's ``__main__``.
    """
    nb = nbformat.read(os.path.join(ROOT, "solutions", notebook), as_version=4)
    ns = {"__name__": f"exercise_{'stub' if stub else 'solution'}_{notebook[:4]}"}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = cell.source
        if exercises.BEGIN in src:
            if stub:
                src, _ = exercises.stub_source(src)
        elif not _is_setup_cell(src):
            continue
        src = src.replace("env = mh.setup()", "env = mh.setup(show=False, prewarm=False)")
        exec(compile(src, f"<{notebook}>", "exec"), ns)
    return ns


_NAMESPACES: dict = {}


def _function(notebook: str, name: str, stub: bool):
    key = (notebook, stub)
    if key not in _NAMESPACES:
        _NAMESPACES[key] = _namespace(notebook, stub)
    return _NAMESPACES[key][name]


PAIRS = _exercise_pairs()


def _by_value(source: str, name: str):
    """A function defined from source text, travelling to ranks by value (like one defined in a cell)."""
    ns = {"__name__": "exercise_wrong_answer"}
    exec(textwrap.dedent(source), ns)
    return ns[name]


# --------------------------------------------------------------------------------------------------------
# The generator.


def test_solution_region_becomes_a_stub_that_says_how_many_lines_to_write():
    src = textwrap.dedent('''\
        def f(x, n):
            """Docstring stays."""
            import torch
            ### BEGIN SOLUTION
            y = x + 1

            # a comment does not count
            for _ in range(n):
                y = y * 2
            return y
            ### END SOLUTION
        ''')
    out, names = exercises.stub_source(src)
    assert names == ["f"]
    assert out == textwrap.dedent('''\
        def f(x, n):
            """Docstring stays."""
            import torch
            raise NotImplementedError("练习：补全这里（约 4 行）")
        ''')


def test_stub_keeps_the_indentation_of_a_region_inside_a_kernel_branch():
    src = "@cuda.jit\ndef k(a, n):\n    i = 0\n    if i < n:\n        ### BEGIN SOLUTION\n        a[i] = 1\n        ### END SOLUTION\n"
    out, names = exercises.stub_source(src)
    assert names == ["k"]
    assert '        raise NotImplementedError("练习：补全这里（约 1 行）")' in out.splitlines()


@pytest.mark.parametrize(
    "src",
    [
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n",  # no END
        "def f():\n    return 1\n    ### END SOLUTION\n",  # END without BEGIN
        "x = 1\n### BEGIN SOLUTION\nprint(2)\n### END SOLUTION\n",  # outside a function, not a name
    ],
)
def test_unpaired_or_stray_markers_are_refused(src):
    with pytest.raises(exercises.MarkerError):
        exercises.stub_source(src)


def _tiny_solution():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# Title"),
        new_code_cell("def shard(costs):\n    ### BEGIN SOLUTION\n    return sorted(costs)\n    ### END SOLUTION"),
        new_code_cell("print(shard([3, 1]))", outputs=[nbformat.v4.new_output("stream", text="[1, 3]\n")]),
        new_code_cell("# EXERCISE_CHECK\nassert True"),
        new_code_cell("print('unrelated')"),
        new_markdown_cell("Spec.\n<!-- BEGIN SOLUTION -->\nthe answer\n<!-- END SOLUTION -->\nMore."),
    ]
    for k, c in enumerate(nb.cells):
        c["id"] = f"c{k}"
    return nb


def test_cells_that_use_a_stub_or_are_marked_as_checks_are_tagged_raises_exception():
    ex, stubbed = exercises.make_exercise(_tiny_solution(), "ex00_tiny.ipynb")
    tags = [c.metadata.get("tags", []) for c in ex.cells]
    assert stubbed == ["shard"]
    assert tags[1] == [] and tags[4] == []  # the definition and the unrelated cell
    assert tags[2] == ["raises-exception"] and tags[3] == ["raises-exception"]
    assert "NotImplementedError" in ex.cells[1].source and "sorted" not in ex.cells[1].source


def test_markdown_answers_are_folded_and_exercises_carry_no_outputs():
    ex, _ = exercises.make_exercise(_tiny_solution(), "ex00_tiny.ipynb")
    md = ex.cells[5].source
    assert md.startswith("Spec.") and md.endswith("More.") and "<!--" not in md
    assert md.index("<details>") < md.index("the answer") < md.index("</details>")
    assert "solutions/ex00_tiny.ipynb" in ex.cells[0].source and "generate" not in ex.cells[0].source
    assert all(
        c.get("outputs", []) == [] and c.get("execution_count") is None for c in ex.cells if c.cell_type == "code"
    )


def test_an_answer_already_inside_details_is_not_folded_twice():
    src = "Q?\n<details><summary>after trying</summary>\n<!-- BEGIN SOLUTION -->\nA.\n<!-- END SOLUTION -->\n</details>"
    assert exercises.fold_markdown(src) == "Q?\n<details><summary>after trying</summary>\nA.\n</details>"


def test_hidden_tests_are_left_out_and_a_cell_of_nothing_else_goes():
    src = (
        "x = f()\n    ### BEGIN HIDDEN TESTS\nassert x == 3\n### END HIDDEN TESTS\nprint(x)\n"
        "if x:\n    ### BEGIN HIDDEN TESTS\n    assert x > 0\n    ### END HIDDEN TESTS\n    print('yes')"
    )
    assert exercises.without_hidden_tests(src) == "x = f()\nprint(x)\nif x:\n    print('yes')"
    assert exercises.without_hidden_tests("# why\n### BEGIN HIDDEN TESTS\nassert ok\n### END HIDDEN TESTS") is None
    assert exercises.without_hidden_tests("no tests\n") == "no tests\n"


@pytest.mark.parametrize(
    "src",
    [
        "### BEGIN HIDDEN TESTS\nassert 1",
        "assert 1\n### END HIDDEN TESTS",
        "### BEGIN HIDDEN TESTS\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS",
    ],
)
def test_unpaired_hidden_test_markers_are_refused(src):
    with pytest.raises(exercises.MarkerError):
        exercises.without_hidden_tests(src)


def test_committed_exercises_are_what_regenerating_writes():
    assert exercises.out_of_sync() == []


def test_check_command_fails_when_an_exercise_was_edited_by_hand(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "exercises"
    shutil.copytree(exercises.EXERCISES_DIR, copy)
    target = sorted(copy.glob("*.ipynb"))[0]
    target.write_text(target.read_text(encoding="utf-8").replace("练习", "Exercise", 1), encoding="utf-8")
    monkeypatch.setattr(exercises, "EXERCISES_DIR", str(copy))
    assert exercises.main(["check"]) == 1
    assert target.name in capsys.readouterr().out
    assert exercises.main(["generate"]) == 0 and exercises.main(["check"]) == 0


def test_every_lesson_from_01_to_14_has_exercises_and_there_are_at_least_24():
    notebooks = {nb for nb, _, _ in PAIRS}
    assert len(PAIRS) >= 24, f"only {len(PAIRS)} exercises found"
    lessons = {os.path.basename(p)[:2] for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))} - {"00"}
    assert lessons == {f"{k:02d}" for k in range(1, 15)}
    assert {nb[2:4] for nb in notebooks} == lessons, sorted(lessons - {nb[2:4] for nb in notebooks})
    assert {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "exercises", "*.ipynb"))} == notebooks


def test_every_exercise_function_is_stubbed_in_its_exercise_notebook():
    for nb_name in {nb for nb, _, _ in PAIRS}:
        ex = nbformat.read(os.path.join(ROOT, "exercises", nb_name), as_version=4)
        text = "\n".join(c.source for c in ex.cells)
        assert exercises.BEGIN not in text and "练习：补全这里" in text
        for nb, checker, fn in PAIRS:
            if nb == nb_name:
                cell = next(c for c in ex.cells if c.cell_type == "code" and f"checks.{checker}({fn}" in c.source)
                assert "raises-exception" in cell.metadata.get("tags", []), (nb, checker)


# --------------------------------------------------------------------------------------------------------
# Both ways: the solution passes, the untouched stub fails with the "not done" message.


# Checkers that need a GPU (CuPy cannot run without one): on a CPU they say they skipped, and still fail the stub.
NEEDS_GPU = {"check_saxpy_cupy"}


@pytest.mark.parametrize("notebook,checker,fn", PAIRS, ids=[f"{c}" for _, c, _ in PAIRS])
def test_solution_passes_its_checker(notebook, checker, fn, capsys):
    getattr(checks, checker)(_function(notebook, fn, stub=False))
    out = capsys.readouterr().out
    if checker in NEEDS_GPU and not ENV.cupy:
        assert out.startswith("跳过：") and "需要 GPU" in out and "还没有被检查" in out, out
    else:
        assert out.startswith("通过："), out


@pytest.mark.parametrize("notebook,checker,fn", PAIRS, ids=[f"{c}" for _, c, _ in PAIRS])
def test_untouched_stub_fails_its_checker_saying_it_is_not_done(notebook, checker, fn):
    with pytest.raises(checks.CheckFailed) as info:
        getattr(checks, checker)(_function(notebook, fn, stub=True))
    assert str(info.value).startswith(checks.NOT_DONE), str(info.value)
    assert fn in str(info.value)


def test_check_failed_is_an_assertion_error():
    assert issubclass(checks.CheckFailed, AssertionError)


# --------------------------------------------------------------------------------------------------------
# Subtly wrong answers are named: which rank, which element, expected vs got.


def test_swapped_rows_and_columns_in_the_2d_kernel_are_found():
    swapped = _by_value(
        """
        from numba import cuda

        @cuda.jit
        def swapped(a, b, c, rows, cols):
            row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            col = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
            if row < rows and col < cols:
                c[row, col] = a[row, col] + b[row, col]
        """,
        "swapped",
    )

    with pytest.raises(checks.CheckFailed, match=r"矩阵 \d+ 行 x \d+ 列.*第 \[\d+, \d+\] 个元素应当是"):
        checks.check_matrix_add(swapped)


def test_occupancy_without_rounding_registers_per_warp_names_the_case():
    def unrounded(block, regs_per_thread, limits):
        warps = -(-block // 32)
        if block > limits.max_threads_per_block:
            return 0
        by_regs = limits.regs_per_sm // (regs_per_thread * 32) // warps
        return min(limits.max_threads_per_sm // 32 // warps, limits.max_blocks_per_sm, by_regs)

    with pytest.raises(
        checks.CheckFailed, match=r"block = \d+，每线程 \d+ 个寄存器：应当是 \d+ 个 Block/SM.*取整后是 \d+ 个"
    ):
        checks.check_blocks_per_sm(unrounded)


def test_one_wave_given_as_the_sm_count_says_what_is_missing():
    with pytest.raises(checks.CheckFailed, match=r"一波应当是 \d+ 个 Block.*是 SM 的个数.*还要乘上它"):
        checks.check_one_wave_blocks(lambda sm_count, regs_per_thread, limits: sm_count)


def test_cupy_checker_fails_the_stub_without_running_it_even_without_a_gpu():
    stub = _by_value(
        """
        def saxpy_cupy(alpha, x, y):
            raise NotImplementedError("练习：补全这里（约 3 行）")
        """,
        "saxpy_cupy",
    )
    with pytest.raises(checks.CheckFailed, match="这个练习还没有完成"):
        checks.check_saxpy_cupy(stub)


@pytest.mark.skipif(not ENV.cupy, reason="needs a GPU: CuPy runs the kernel")
def test_alpha_passed_as_a_python_float_is_explained():
    wrong = _by_value(
        """
        def double_alpha(alpha, x, y):
            import cupy as cp, numpy as np
            src = 'extern "C" __global__ void s(float a, const float* x, float* y, int n) {' \\
                  ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }'
            n = y.size
            cp.RawKernel(src, "s")(((n + 255) // 256,), (256,), (alpha, x, y, np.int32(n)))
            return y
        """,
        "double_alpha",
    )
    with pytest.raises(checks.CheckFailed, match="np.float32"):
        checks.check_saxpy_cupy(wrong)


def test_wrong_direction_in_the_ring_names_the_rank_and_whose_data_arrived():
    wrong = _by_value(
        """
        def pass_left(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, x, (rank - 1) % world_size),
                   dist.P2POp(dist.irecv, got, (rank + 1) % world_size)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            return got
        """,
        "pass_left",
    )
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_pass_right(wrong, world_sizes=(3,))
    msg = str(info.value)
    assert re.search(r"world_size = 3，rank 0 应当收到左边 rank 2 的数据：第 \d+ 个元素应当是", msg), msg
    assert "那正是 rank 1 的输入" in msg


def test_send_first_on_every_rank_is_reported_as_a_deadlock():
    wrong = _by_value(
        """
        def send_first(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            dist.send(x, (rank + 1) % world_size)
            dist.recv(got, (rank - 1) % world_size)
            return got
        """,
        "send_first",
    )
    with pytest.raises(checks.CheckFailed, match=r"死锁.*rank 0 卡在 dist.send"):
        checks.check_pass_right(wrong, world_sizes=(2,), timeout=4)


def test_all_gather_in_arrival_order_names_the_misplaced_piece():
    wrong = _by_value(
        """
        def arrival_order(rank, world_size, x):
            import torch, torch.distributed as dist
            parts, token = [x.clone()], x.clone()
            for _ in range(world_size - 1):
                incoming = torch.empty_like(x)
                ops = [dist.P2POp(dist.isend, token, (rank + 1) % world_size),
                       dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
                parts.append(incoming)
                token = incoming
            return torch.cat(parts)
        """,
        "arrival_order",
    )
    with pytest.raises(checks.CheckFailed, match=r"rank \d+：结果里第 \d+ 段.*应当是 rank \d+ 的数据.*按 rank 顺序放"):
        checks.check_all_gather(wrong, world_sizes=(3,))


def test_calling_the_collective_itself_is_refused_in_a_point_to_point_exercise():
    cheat = _by_value(
        """
        def cheat(rank, world_size, x):
            import torch.distributed as dist
            dist.all_reduce(x)
            return x
        """,
        "cheat",
    )
    with pytest.raises(checks.CheckFailed, match="不能直接调用 dist.all_reduce"):
        checks.check_ring_all_reduce(cheat, world_sizes=(2,))


def test_gradients_summed_but_not_averaged_name_the_rank_and_parameter():
    wrong = _by_value(
        """
        def no_average(model, optimizer, x, y, world_size):
            import torch.distributed as dist
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            return float(loss)
        """,
        "no_average",
    )
    with pytest.raises(
        checks.CheckFailed, match=r"world_size = 2.*rank 0 的参数.*第 \d+ 个元素应当是.*除以 world_size"
    ):
        checks.check_data_parallel_step(wrong, world_sizes=(2,))


def test_answering_with_a_majority_rank_explains_the_evidence():
    def first_rank(evidence):
        return (0, 0, "all_reduce")

    with pytest.raises(
        checks.CheckFailed, match=r"\d 个 Rank 的证据：rank .*应当回答 \(\d, \d, .*你的回答是 \(0, 0, 'all_reduce'\)"
    ):
        checks.check_find_mismatch(first_rank)


def test_unchanged_shards_are_not_a_rebalance():
    with pytest.raises(checks.CheckFailed, match=r"rank 0 预计要 .*最好的整数分法 \[6, 6, 6, 6\]"):
        checks.check_rebalance(lambda shards, seconds: list(shards))


def test_no_wait_predicted_for_equal_shards_is_told_about_the_slow_rank():
    with pytest.raises(
        checks.CheckFailed, match=r"rank 0 每步等 [0-9.]+ s.*你的预测是 0\.000 s。Shard 一样大，时间却不一定一样"
    ):
        checks.check_wait_prediction(lambda: 0.0)


def test_the_slow_rank_s_whole_compute_as_the_wait_is_held_against_the_measured_wait():
    with pytest.raises(checks.CheckFailed, match=r"rank 0 每步等 [0-9.]+ s.*你的预测是 0\.360 s.*要等到谁算完"):
        checks.check_wait_prediction(lambda: 6 * 0.060)


def test_the_wait_behind_a_slow_rank_written_as_a_difference_passes(capsys):
    checks.check_wait_prediction(lambda: 6 * 0.060 - 6 * 0.020)
    assert "通过" in capsys.readouterr().out


def test_hang_evidence_reads_like_the_launchers():
    ev = checks.make_hang_evidence(4, 5, 1, "late", "all_reduce")
    assert isinstance(ev, mh.RankTimeout)
    assert [ev.collectives[r]["stuck_in"] for r in range(4)] == [
        (4, "all_reduce"),
        None,
        (4, "all_reduce"),
        (4, "all_reduce"),
    ]
    assert ev.collectives[1]["last_completed"] == (3, "broadcast") and 1 not in ev.waiting_in


# -- ex12: the lab's ownership check, a number first, the conclusions as data ------------------------------


def test_an_ownership_check_where_every_rank_claims_everything_names_the_shared_element():
    replicated = _by_value(
        """
        def replicated(rank, world_size, data):
            import torch.distributed as dist
            buf = (data ** 2).sum().reshape(1)
            local = float(buf.item())
            dist.all_reduce(buf)
            return {"shard": (0, len(data)), "local": local, "result": float(buf.item()),
                    "expected": float((data ** 2).sum()), "ok": True}
        """,
        "replicated",
    )
    with pytest.raises(
        checks.CheckFailed, match=r"world_size = 2，输入 \d+ 个元素：元素 0 同时归 rank 0 和 rank 1 所有"
    ):
        checks.check_ownership_check(replicated, world_sizes=(2,))


def test_an_ownership_check_without_the_all_reduce_is_caught_by_the_ranks_result():
    no_reduce = _by_value(
        """
        def no_reduce(rank, world_size, data):
            n = len(data)
            base, extra = divmod(n, world_size)
            start = rank * base + min(rank, extra)
            stop = start + base + (1 if rank < extra else 0)
            local = float((data[start:stop] ** 2).sum())
            expected = float((data ** 2).sum())
            return {"shard": (start, stop), "local": local, "result": local, "expected": expected,
                    "ok": local == expected}
        """,
        "no_reduce",
    )
    with pytest.raises(checks.CheckFailed, match=r"rank 0 All-Reduce 之后得到 .*这正是它自己的局部结果"):
        checks.check_ownership_check(no_reduce, world_sizes=(3,))


@pytest.mark.parametrize(
    "answer,why",
    [
        (0.840, "busbw 之比"),  # RS+AG busbw / all-reduce busbw: the inverse
        (0.19, "百分之几"),  # "19% slower" written as a number
        (1.0, "两次启动延迟"),  # only the launch latency counted
        (2.0, "每一半的时间"),  # far off: the formula's nudge
    ],
)
def test_rs_ag_slowdown_names_the_usual_confusions(answer, why):
    with pytest.raises(checks.CheckFailed, match=f"记录的是 1.191.*{why}"):
        checks.check_rs_ag_slowdown(lambda: answer)


# -- ex03 and ex05's byte counting: wrong answers are named ----------------------------------------------------


def test_placement_that_uses_the_global_rank_as_local_rank_is_explained():
    def global_as_local(rank, nproc_per_node, visible):
        return rank // nproc_per_node, rank, visible[rank % nproc_per_node]

    with pytest.raises(
        checks.CheckFailed, match=r"rank 5，每台机器 4 个进程.*local_rank 应当是 1，你的是 5.*不是全局的 rank"
    ):
        checks.check_placement(global_as_local)


def test_placement_that_ignores_cuda_visible_devices_names_the_physical_gpu():
    def logical_gpu(rank, nproc_per_node, visible):
        return rank // nproc_per_node, rank % nproc_per_node, rank % nproc_per_node

    with pytest.raises(checks.CheckFailed, match=r"physical_gpu 应当是 \d+，你的是 \d+.*CUDA_VISIBLE_DEVICES="):
        checks.check_placement(logical_gpu)


def test_joining_without_leaving_the_group_is_reported():
    stays = _by_value(
        """
        def stays(rank, world_size, x):
            import os
            import torch.distributed as dist
            dist.init_process_group(backend=os.environ["MGPU_BACKEND"], init_method="env://")
            dist.all_reduce(x)
            return x.cpu()
        """,
        "stays",
    )
    with pytest.raises(checks.CheckFailed, match=r"rank \d 返回时进程组还开着.*destroy_process_group"):
        checks.check_join_and_sum(stays, world_sizes=(2,))


def test_joining_but_not_summing_names_the_rank_and_its_own_input():
    # rank 0 is named unless its own x happens to equal the sum (the other input all zero): then rank 1 is
    lonely = _by_value(
        """
        def lonely(rank, world_size, x):
            import os
            import torch.distributed as dist
            dist.init_process_group(backend=os.environ["MGPU_BACKEND"], init_method="env://")
            dist.destroy_process_group()
            return x
        """,
        "lonely",
    )
    with pytest.raises(
        checks.CheckFailed, match=r"world_size = 2，rank [01]：第 0 个元素应当是.*还要做一次 all_reduce"
    ):
        checks.check_join_and_sum(lonely, world_sizes=(2,))


def test_counting_received_bytes_too_is_reported_as_twice_the_count():
    both = _by_value(
        """
        def both(rank, world_size, x):
            import torch.distributed as dist
            import mgpu_helpers as mh
            seen = 0
            original = dist.batch_isend_irecv
            def counting(ops):
                nonlocal seen
                seen += sum(op.tensor.numel() * op.tensor.element_size() for op in ops)
                return original(ops)
            dist.batch_isend_irecv = counting
            try:
                mh.lessons.ring.ring_all_reduce(x)
            finally:
                dist.batch_isend_irecv = original
            return seen
        """,
        "both",
    )
    with pytest.raises(checks.CheckFailed, match=r"world_size = 2，\d+ 个 float32.*rank 0.*两倍：把收到的.*也算进去了"):
        checks.check_count_sent_bytes(both, world_sizes=(2,))


def test_guessing_half_the_bytes_is_told_about_the_second_phase():
    with pytest.raises(checks.CheckFailed, match=r"你的答案 3000000.*6000000 字节.*All-Gather 阶段也要发"):
        checks.check_ring_bytes_guess(lambda: 3_000_000)


# -- ex11: the review's numbers ------------------------------------------------------------------------------


def test_four_ranks_predicted_four_times_faster_is_held_against_the_uneven_run():
    with pytest.raises(
        checks.CheckFailed, match=r"Shard 12/6/4/2.*量到加速比 [0-9.]+×.*你的预测是 4\.00×。4 个 Rank 不会自动快 4 倍"
    ):
        checks.check_speedup_prediction(lambda: (4.0, 4.0))


def test_the_rank_that_waits_longest_is_not_the_straggler():
    def most_waiting(values):
        waits = [statistics.median(v["wait_s"]) for v in values]
        return max(range(len(values)), key=lambda r: waits[r]), 0.0

    with pytest.raises(checks.CheckFailed, match=r"Straggler 是 rank \d，你给的是 rank \d。rank \d 等得最久"):
        checks.check_find_straggler(most_waiting)


def test_a_straggler_found_by_summing_steps_is_told_about_the_stalled_step():
    def by_sum(values):  # the loss is computed right (as the reference does), the rank by a sum
        rank = max(range(len(values)), key=lambda r: sum(values[r]["compute_s"]))
        steps = range(len(values[0]["compute_s"]))
        lost = statistics.median(
            max(v["compute_s"][k] for v in values) - statistics.fmean(v["compute_s"][k] for v in values) for k in steps
        )
        return rank, lost

    with pytest.raises(checks.CheckFailed, match=r"计算总和最大，是因为它有一步被卡住了"):
        checks.check_find_straggler(by_sum)


def test_the_synthetic_straggler_records_fool_a_sum_but_not_a_median():
    import random

    from mgpu_helpers.checks import review

    rng = random.Random(7)
    for _ in range(50):
        values = review._synthetic_values(rng)
        rank, _ = review.reference_straggler(values)
        sums = [sum(v["compute_s"]) for v in values]
        assert max(range(len(values)), key=lambda r: sums[r]) != rank
        assert all(
            abs(v["wait_s"][k] + v["compute_s"][k] - max(w["compute_s"][k] for w in values)) < 1e-12
            for v in values
            for k in range(5)
        )


# --------------------------------------------------------------------------------------------------------
# Lessons: the learner's notebook from the worked one.


def test_a_region_outside_a_function_keeps_only_names_set_to_none_and_their_comments():
    src = textwrap.dedent("""\
        import math
        ### BEGIN SOLUTION
        # ✎ the ratio of the two copies to the kernel
        my_ratio = 12.5   # 拷贝 / Kernel
        my_claims = {
            "winner": "ring",
        }
        ### END SOLUTION
        print(my_ratio)
        """)
    out, names = exercises.stub_source(src)
    assert names == []
    assert out == textwrap.dedent("""\
        import math
        # ✎ the ratio of the two copies to the kernel
        my_ratio = None  # 拷贝 / Kernel
        my_claims = None
        print(my_ratio)
        """)


def test_a_region_outside_a_function_that_is_not_assignments_is_refused():
    with pytest.raises(exercises.MarkerError, match="only assignments"):
        exercises.stub_source("### BEGIN SOLUTION\nfor i in range(3):\n    print(i)\n### END SOLUTION\n")


def test_hint_comments_of_a_function_region_stay_in_the_stub():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    # ✎ one line: double it\n    return 2 * x\n    ### END SOLUTION\n"
    out, _ = exercises.stub_source(src)
    assert out.splitlines()[1:3] == [
        "    # ✎ one line: double it",
        '    raise NotImplementedError("练习：补全这里（约 1 行）")',
    ]


def _tiny_lesson():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# 99 A lesson"),
        new_code_cell("#| export\ndef double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
        new_code_cell("double = mh.checks.fill_in(double, check, reference, 'double')"),
        new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(double(2))", outputs=[nbformat.v4.new_output("stream", text="4\n")]),
        new_markdown_cell("Why?\n<!-- BEGIN SOLUTION -->\nbecause\n<!-- END SOLUTION -->"),
    ]
    for k, c in enumerate(nb.cells):
        c["id"] = f"c{k}"
    return nb


def test_a_lesson_keeps_checked_outputs_drops_the_export_line_and_tags_nothing():
    les, stubbed = exercises.make_lesson(_tiny_lesson(), "99_lesson.ipynb")
    assert stubbed == ["double"]
    assert les.cells[1].source.startswith("def double(x):") and "2 * x" not in les.cells[1].source
    assert all("raises-exception" not in c.metadata.get("tags", []) for c in les.cells)
    assert les.cells[3].outputs and les.cells[3].outputs[0]["text"] == "4\n"  # what nbval compares with
    assert les.cells[4].source.index("<details>") < les.cells[4].source.index("because")
    assert "solutions/99_lesson.ipynb" in les.cells[0].source


def test_the_learners_copy_has_no_outputs_no_check_marker_and_no_hidden_test_cell():
    nb = _tiny_lesson()
    nb.cells.insert(4, nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nassert double(3) == 6\n### END HIDDEN TESTS"))
    tested, _ = exercises.make_lesson(nb, "99_lesson.ipynb")
    assert len(tested.cells) == 6 and "assert double(3) == 6" in tested.cells[4].source
    copy = exercises.learner_copy(tested)
    assert [c.source for c in copy.cells if c.cell_type == "code"][-1] == "print(double(2))"
    assert len(copy.cells) == 5 and all(c.outputs == [] for c in copy.cells if c.cell_type == "code")
    kept = exercises.learner_copy(tested, keep_outputs=True)
    assert kept.cells[3].outputs[0]["text"] == "4\n" and kept.cells[3].source == "print(double(2))"


def test_a_checked_cell_may_not_hold_a_fill_in():
    nb = _tiny_lesson()
    nb.cells[3].source = "# NBVAL_CHECK_OUTPUT\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION\nprint(x)"
    with pytest.raises(exercises.MarkerError, match="checked by nbval"):
        exercises.make_lesson(nb, "99_lesson.ipynb")


def test_lessons_go_to_notebooks_and_exercises_to_exercises():
    assert exercises.learner_path("/x/solutions/05_collectives.ipynb") == os.path.join(
        exercises.NOTEBOOKS_DIR, "05_collectives.ipynb"
    )
    assert exercises.learner_path("/x/solutions/ex05_collectives.ipynb").startswith(exercises.EXERCISES_DIR)


def test_fill_in_gives_the_reference_for_a_stub_and_the_learners_function_once_it_passes(capsys):
    def reference(x):
        return 2 * x

    def check(fn):
        if fn(3) != 6:
            raise checks.CheckFailed(f"double(3) 应当是 6，实际是 {fn(3)}")
        print("通过：double")

    stub = _by_value('def double(x):\n    raise NotImplementedError("练习：补全这里（约 1 行）")\n', "double")
    assert checks.fill_in(stub, check, reference, "double") is reference
    assert "还没写" in capsys.readouterr().out
    assert checks.fill_in(None, check, reference, "double") is reference
    good = _by_value("def double(x):\n    return x + x\n", "double")
    assert checks.fill_in(good, check, reference, "double") is good
    assert capsys.readouterr().out.startswith("还没写") is False
    wrong = _by_value("def double(x):\n    return x * x\n", "double")
    with pytest.raises(checks.CheckFailed, match="应当是 6"):
        checks.fill_in(wrong, check, reference, "double")


def test_a_fill_in_cell_looks_up_the_course_version_when_called_and_refuses_it_in_the_answer(capsys):
    from mgpu_helpers.checks.core import fill_in_cell
    from mgpu_helpers.lessons import cost_model

    def check(fn):
        if fn(1 << 20, 4, 0.0, 1e-9) != pytest.approx(2 * 3 / 4 * (1 << 20) * 1e-9):
            raise checks.CheckFailed("不对")

    try_cost = fill_in_cell(
        check,
        "mgpu_helpers.lessons.cost_model.ring_allreduce_seconds",
        "cost",
        refuse=["mgpu_helpers.lessons.cost_model.ring_allreduce_seconds"],
    )
    assert try_cost(None) is cost_model.ring_allreduce_seconds and "还没写" in capsys.readouterr().out
    own = _by_value("def cost(nbytes, p, alpha, beta):\n    return 2 * (p - 1) * (alpha + nbytes / p * beta)\n", "cost")
    assert try_cost(own) is own
    calls_course = _by_value(
        "import mgpu_helpers as mh\ndef cost(nbytes, p, alpha, beta):\n"
        "    return mh.lessons.cost_model.ring_allreduce_seconds(nbytes, p, alpha, beta)\n",
        "cost",
    )
    with pytest.raises(checks.CheckFailed, match="课程"):
        try_cost(calls_course)
    # A class counts as unwritten while one of its methods still holds the stub.
    half_done = _by_value(
        "class Step:\n    def setup(self):\n        return 1\n    def step(self):\n"
        "        raise NotImplementedError('练习：补全这里（约 2 行）')\n",
        "Step",
    )
    assert checks.core.has_stub(half_done) and try_cost(half_done) is cost_model.ring_allreduce_seconds


def test_every_lesson_fill_in_hands_back_the_course_version_while_unwritten(capsys):
    """Each ``try_x`` of the checkers finds the course's version it names (a wrong dotted name fails here, not in a
    learner's notebook)."""
    import importlib
    import inspect
    import pkgutil

    import mgpu_helpers.checks as package

    tried = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"mgpu_helpers.checks.{info.name}")
        for name, fn in vars(module).items():
            if name.startswith("try_") and callable(fn) and len(inspect.signature(fn).parameters) == 1:
                assert fn(None) is not None, name
                tried.append(name)
    assert len(tried) >= 25, tried  # a sanity floor: issue #38 removed transcription fill-ins
    assert "还没写" in capsys.readouterr().out


def test_a_prediction_left_none_gets_the_measurement_and_a_reminder():
    line = mh.widgets.predict.compare("拷贝 / Kernel", None, 12.0, show=False)
    assert "12" in line and "还没写预测" in line
    assert "还没写预测" in mh.widgets.predict.compare_choice("哪一个更快", None, "ring", ["ring", "tree"], show=False)


def test_a_worked_only_cell_becomes_an_import_of_what_it_defines():
    nb = _tiny_lesson()
    nb.metadata["mgpu"] = {"export": "lesson99"}
    nb.cells.insert(
        2,
        nbformat.v4.new_code_cell(
            "#| export\ndef full(x, y=2):\n    return x * y\n\n\nSCALE = 3",
            metadata={"tags": ["worked-only"], "jupyter": {"source_hidden": True}},
        ),
    )
    nb.cells[2]["id"] = "worked"
    les, _ = exercises.make_lesson(nb, "99_lesson.ipynb")
    cell = les.cells[2]
    assert "return x * y" not in cell.source
    assert cell.source.splitlines()[-1] == "from mgpu_helpers.lessons.lesson99 import full, SCALE"
    assert "tags" not in cell.metadata and "jupyter" not in cell.metadata
    nb.cells[2].source = nb.cells[2].source.replace("#| export\n", "")
    with pytest.raises(exercises.MarkerError, match="not an `#| export` cell"):
        exercises.make_lesson(nb, "99_lesson.ipynb")
