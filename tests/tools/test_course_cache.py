"""CuPy's kernel cache lives in a private folder of the user's cache directory, never at a fixed /tmp name."""

from __future__ import annotations

import os
import stat

import pytest

from mgpu_helpers import course


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUPY_CACHE_DIR", "set by the test")  # restored (unset) afterwards
    monkeypatch.delenv("CUPY_CACHE_DIR")
    return tmp_path / "cache"


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_setup_puts_the_cupy_cache_in_a_private_folder_of_the_user_cache(cache_home):
    old = os.umask(0o022)
    try:
        env = course.setup(show=False, prewarm=False)
    finally:
        os.umask(old)
    path = os.environ["CUPY_CACHE_DIR"]
    assert path == str(cache_home / "mgpu-course" / "cupy") and env.mode in ("cpu", "gpu")
    for folder in (cache_home / "mgpu-course", cache_home / "mgpu-course" / "cupy"):
        assert _mode(folder) == 0o700 and os.lstat(folder).st_uid == os.getuid()


def test_xdg_unset_means_dot_cache_in_home(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert course.private_cache_dir("cupy") == str(tmp_path / ".cache" / "mgpu-course" / "cupy")


def test_a_folder_others_could_write_to_is_emptied_and_made_private(cache_home):
    planted = cache_home / "mgpu-course" / "cupy"
    planted.mkdir(parents=True)
    (planted / "kernel.cubin").write_bytes(b"not ours")
    os.chmod(planted, 0o777)
    assert course.private_cache_dir("cupy") == str(planted)
    assert _mode(planted) == 0o700 and os.listdir(planted) == []


def test_a_link_in_place_of_the_folder_is_refused(cache_home, tmp_path):
    (cache_home / "mgpu-course").mkdir(parents=True, mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, cache_home / "mgpu-course" / "cupy")
    with pytest.raises(PermissionError, match="not a folder of yours"):
        course.private_cache_dir("cupy")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a folder to another user")
def test_a_folder_of_another_user_is_refused_and_setup_only_warns(cache_home):
    theirs = cache_home / "mgpu-course"
    theirs.mkdir(parents=True, mode=0o700)
    os.chown(theirs, 12345, 12345)
    with pytest.raises(PermissionError, match="owned by uid 12345"):
        course.private_cache_dir("cupy")
    with pytest.warns(UserWarning, match="owned by uid 12345"):
        course.setup(show=False, prewarm=False)
    assert "CUPY_CACHE_DIR" not in os.environ
