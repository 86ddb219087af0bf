"""Comparing the learner's answer with the reference, and naming the usual mistake when they differ."""

import math

import numpy as np

from .failure import CheckFailed


def first_hint(*slips, default: str = "") -> str:
    """The text of the first ``(it is this mistake, text)`` pair that holds, else ``default``."""
    return next((text for holds, text in slips if holds), default)


def fail_first(*slips) -> None:
    """Raise :class:`CheckFailed` with the text of the first ``(holds, text)`` pair that holds (all are evaluated)."""
    if text := first_hint(*slips):
        raise CheckFailed(text)


def matching_hint(got, slips, default: str = "", **tolerance) -> str:
    """The text of the first ``(value, text)`` whose value ``got`` is close to (None: no match), else ``default``."""
    return next((text for value, text in slips if value is not None and math.isclose(got, value, **tolerance)), default)


def expect_items(got, count: int, failure: str, numbers: bool = False) -> None:
    """Raise :class:`CheckFailed` saying ``failure`` unless ``got`` is a tuple or list of ``count`` items."""
    if not isinstance(got, (tuple, list)) or len(got) != count or numbers and not all(map(is_number, got)):
        raise CheckFailed(failure)


def number_answer(got, failure: str) -> float:
    """``float(got)`` when the learner returned a real number (a NumPy scalar too), else :class:`CheckFailed`."""
    value = got.item() if isinstance(got, np.generic) else got
    if not is_number(value):
        raise CheckFailed(failure)
    return float(value)


def is_rank_number(v) -> bool:
    """A whole number that can name a rank: a Python or NumPy integer (``np.argmin`` gives one), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_number(v) -> bool:
    """A real number the learner returned: int or float, not a bool, not NaN."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def fmt(v) -> str:
    v = float(v)
    return "NaN（没有写入）" if math.isnan(v) else f"{v:g}"


def compare(got, want, where: str, hint: str = "", atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Element by element; the first difference is named (index, expected, got)."""
    if got is None:
        raise CheckFailed(f"{where}：返回了 None。函数最后要 return 结果。")
    if isinstance(got, (list, tuple)) and got and not np.isscalar(got[0]):
        raise CheckFailed(
            f"{where}：返回了一个含 {len(got)} 个对象的列表；应当返回一个张量（列表可以用 torch.cat 拼起来）。"
        )
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise CheckFailed(f"{where}：结果的形状是 {got.shape}，应当是 {want.shape}。{hint}".rstrip())
    bad = np.argwhere(~(np.isclose(got, want, atol=atol, rtol=rtol) & ~np.isnan(got)))
    if len(bad):
        k = tuple(int(i) for i in bad[0])
        idx = k[0] if len(k) == 1 else list(k)
        raise CheckFailed(
            f"{where}：第 {idx} 个元素应当是 {fmt(want[k])}，实际是 {fmt(got[k])}"
            f"（共 {len(bad)} 个元素不对）。{hint}".rstrip()
        )


def which_rank(got, inputs) -> str:
    """'（那正是 rank k 的输入）' when ``got`` equals rank k's input, else ''."""
    for k, inp in enumerate(inputs):
        if got is not None and np.shape(got) == np.shape(inp) and np.allclose(got, inp):
            return f"（那正是 rank {k} 的输入）"
    return ""


def int_values(rng, shape) -> np.ndarray:
    """Random small whole numbers as float32: sums are exact in any order, and messages stay readable."""
    return rng.integers(-50, 51, size=shape).astype(np.float32)


def new_rng():
    return np.random.default_rng()
