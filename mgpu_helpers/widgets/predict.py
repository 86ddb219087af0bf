"""Predict, then measure: the learner's guess (``None`` until written, so a notebook still runs unattended) beside
the measurement, in one line that says how far it was, never whether the learner "passed"."""

import math

# What a prediction still None is told beside the measurement.
UNWRITTEN = "你还没写预测（上面那格还是 None）：下一次先写下你的猜测再运行，对照着看才知道自己的直觉差在哪里。"


def _fmt(value: float, unit: str) -> str:
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def ratio_text(predicted: float, measured: float) -> str:
    """'高估了 2.0 倍' / '低估了 1.5 倍' / '几乎正好（相差不到 10%）'; also for zero and negative values."""
    if measured == predicted:
        return "正好"
    if predicted <= 0 or measured <= 0 or math.isnan(predicted) or math.isnan(measured):
        return f"相差 {measured - predicted:+.3g}"
    r = predicted / measured
    if 1 / 1.1 <= r <= 1.1:
        return "几乎正好（相差不到 10%）"
    return f"高估了 {r:.2g} 倍" if r > 1 else f"低估了 {1 / r:.2g} 倍"


def compare(name: str, predicted: float, measured: float, unit: str = "", show: bool = True) -> str:
    """One line: prediction, measurement and their ratio (printed when ``show``); ValueError if not a number."""
    if predicted is None:
        return _said(name, f"{name}：测量 {_fmt(float(measured), unit)}。{UNWRITTEN}", show, written=False)
    try:
        predicted = float(predicted)
    except (TypeError, ValueError):
        raise ValueError(f"{name}：预测要写成一个数（例如 0.5），现在是 {predicted!r}") from None
    ratio = ratio_text(predicted, float(measured))
    return _said(name, f"{name}：你的预测 {_fmt(predicted, unit)}，测量 {_fmt(float(measured), unit)}，{ratio}。", show)


def compare_choice(name: str, predicted, measured, options, show: bool = True) -> str:
    """The same for a choice among ``options`` (any values); raises ``ValueError`` for a choice not offered."""
    options = list(options)
    if predicted is None:
        return _said(name, f"{name}：测量 {measured!r}。{UNWRITTEN}", show, written=False)
    if predicted not in options:
        raise ValueError(f"{name}：预测要从 {options} 里选一个，现在是 {predicted!r}")
    verdict = "和测量一致" if predicted == measured else f"测量的结果是 {measured!r}"
    return _said(name, f"{name}：你的预测 {predicted!r}，{verdict}。", show)


def _said(name: str, line: str, show: bool, written: bool = True) -> str:
    """``line``, printed first when ``show``; a written prediction is noted in the learner's progress."""
    from mgpu_helpers import tracking

    if written:
        tracking.record("prediction", name)
    if show:
        print(line)
    return line
