"""Prediction against measurement: the line says how far the guess was, and bad input says what to write."""

import pytest

import mgpu_helpers as mh
from mgpu_helpers.widgets import predict


def test_ratio_in_both_directions_and_near_enough():
    assert predict.ratio_text(2.0, 1.0) == "高估了 2 倍"
    assert predict.ratio_text(1.0, 4.0) == "低估了 4 倍"
    assert predict.ratio_text(1.05, 1.0).startswith("几乎正好")
    assert predict.ratio_text(0.0, 2.0) == "相差 +2"


def test_compare_prints_and_returns_the_line(capsys):
    line = predict.compare("时间", "0.5", 1.0, "s")
    assert line == capsys.readouterr().out.strip()
    assert "你的预测 0.5 s" in line and "测量 1 s" in line and "低估了 2 倍" in line


def test_a_prediction_that_is_not_a_number_says_what_to_write():
    with pytest.raises(ValueError, match="预测要写成一个数"):
        predict.compare("时间", "fast", 1.0)


def test_choices():
    assert "和测量一致" in predict.compare_choice("瓶颈", "通信", "通信", ["计算", "通信"], show=False)
    assert "测量的结果是 '计算'" in predict.compare_choice("瓶颈", "通信", "计算", ["计算", "通信"], show=False)
    with pytest.raises(ValueError, match="里选一个"):
        predict.compare_choice("瓶颈", "内存", "计算", ["计算", "通信"])


# --------------------------------------------------------------------------------------------------------
# A prediction left None.


def test_a_prediction_left_none_gets_the_measurement_and_a_reminder():
    line = mh.widgets.predict.compare("拷贝 / Kernel", None, 12.0, show=False)
    assert "12" in line and "还没写预测" in line
    assert "还没写预测" in mh.widgets.predict.compare_choice("哪一个更快", None, "ring", ["ring", "tree"], show=False)
