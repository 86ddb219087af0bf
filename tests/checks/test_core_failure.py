"""What a failed check looks like (mgpu_helpers.checks.core.failure): in IPython its message alone, the whole
trace on request; an exercise still holding its generated stub is told apart from a wrong one."""

import subprocess
import sys
import textwrap

import pytest

from mgpu_helpers.checks.core import NOT_DONE, CheckFailed, has_stub, require_written


def test_a_failed_check_shows_in_ipython_as_its_message_and_the_trace_on_request():
    # In a process of its own: an IPython shell alive in this one would turn tqdm.auto into notebook bars.
    script = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance(colors="nocolor")
        shell.run_cell("from mgpu_helpers.checks.core import CheckFailed\\n"
                       "def check():\\n    raise CheckFailed('n = 7：第 6 个元素没有写到')\\ncheck()")
        print("=====")
        shell.run_cell("import mgpu_helpers as mh\\nmh.checks.show_trace()")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    shown, trace = (run.stdout + run.stderr).split("=====")
    assert "检查没有通过" in shown and "n = 7：第 6 个元素没有写到" in shown and "mh.checks.show_trace()" in shown
    assert "Traceback" not in shown and "def check" not in shown and "failure.py" not in shown
    assert "Traceback" in trace and "check()" in trace


def _stub(n):
    raise NotImplementedError("练习：补全这里")


def _helper_stub(n):
    def inner():
        raise NotImplementedError("练习：补全这里")

    return inner()


class _HalfWritten:
    def written(self):
        return 1

    def unwritten(self):
        raise NotImplementedError("练习：补全这里")


def test_the_generated_stub_is_found_in_a_function_a_nested_function_and_a_class():
    assert has_stub(_stub) and has_stub(_helper_stub) and has_stub(_HalfWritten)
    assert not has_stub(lambda n: n + 1)
    with pytest.raises(CheckFailed, match=f"^{NOT_DONE}：求和。`_stub` 里还是练习占位"):
        require_written(_stub, "求和")
    require_written(abs, "求和")  # a function without the stub passes
