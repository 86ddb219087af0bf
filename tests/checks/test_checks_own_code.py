"""The learner's own passing code kept for later notebooks (mgpu_helpers.own_code, via fill_in(keep=)):
04's exchange, once it passes, is what 05 loads; a stored file that no longer loads or no longer passes
falls back to the course's version with a message, never an error. Each test uses its own folder
($MGPU_OWN_CODE_DIR), so no test depends on a notebook having run before."""

import textwrap

import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from learner_code import PARITY_EXCHANGE  # noqa: E402

from mgpu_helpers import own_code  # noqa: E402
from mgpu_helpers.checks import p2p  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed  # noqa: E402


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(own_code.ENV_DIR, str(tmp_path))
    return tmp_path


def _cell(source: str, name: str, tmp_path):
    """A function defined in a 'cell': from a file, so that inspect.getsource reads it as IPython lets it."""
    path = tmp_path / "cell.py"
    path.write_text("import torch.distributed as dist\n" + textwrap.dedent(source))
    ns = {"__name__": "learner_cell", "__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns[name]


def test_nothing_stored_gives_the_fallback_and_says_so(capsys):
    got = mh.mine("exchange", fallback=mh.lessons.p2p.exchange, lesson="04")
    assert got is mh.lessons.p2p.exchange
    assert "04 的 exchange 还没通过检查，先用课程的版本" in capsys.readouterr().out


def test_a_passing_exchange_is_kept_and_loaded_again(store, capsys, tmp_path):
    mine = _cell(PARITY_EXCHANGE, "exchange", tmp_path)
    assert p2p.try_exchange(mine) is mine
    out = capsys.readouterr().out
    assert "通过" in out and "已经存下" in out
    assert (store / "exchange.py").exists()
    loaded = mh.mine("exchange", fallback=mh.lessons.p2p.exchange)
    assert loaded is not mh.lessons.p2p.exchange and loaded.__name__ == "exchange"
    assert "用的是你在 04 写的 exchange" in capsys.readouterr().out
    # and what was loaded is the learner's code, working on ranks (sent by value)
    p2p.check_exchange(loaded, world_sizes=(2,))


def test_the_unwritten_stub_is_not_kept(store, capsys):
    p2p.try_exchange(None)
    assert not (store / "exchange.py").exists()


def test_a_wrong_exchange_is_not_kept(store, tmp_path):
    wrong = _cell(
        """
        def exchange(send_buf, dst, recv_buf, src, group=None):
            return []                          # moves nothing
        """,
        "exchange",
        tmp_path,
    )
    with pytest.raises(CheckFailed):
        p2p.try_exchange(wrong)
    assert not (store / "exchange.py").exists()


def test_a_stored_file_that_no_longer_imports_falls_back(store, capsys):
    (store / "exchange.py").write_text("# mgpu-own-code: name=exchange lesson=04 check=\ndef exchange(:\n")
    assert mh.mine("exchange", fallback=mh.lessons.p2p.exchange) is mh.lessons.p2p.exchange
    assert "没能用上" in capsys.readouterr().out


def test_a_stored_file_that_fails_its_check_again_falls_back(store, capsys):
    (store / "exchange.py").write_text(
        "# mgpu-own-code: name=exchange lesson=04 check=mgpu_helpers.checks.p2p.check_exchange\n"
        "def exchange(send_buf, dst, recv_buf, src, group=None):\n    return []\n"
    )
    assert mh.mine("exchange", fallback=mh.lessons.p2p.exchange) is mh.lessons.p2p.exchange
    out = capsys.readouterr().out
    assert "没能用上" in out and "先用课程的版本" in out


def test_a_name_that_is_not_an_identifier_is_refused():
    with pytest.raises(ValueError, match="identifier"):
        own_code.save("../x", lambda: 0)
