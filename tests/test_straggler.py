import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mgpu_helpers.measure.trace import Span  # noqa: E402
from mgpu_helpers.widgets import straggler  # noqa: E402


def test_real_traced_run_biggest_shard_waits_least_and_balanced_waits_less():
    uneven = straggler.run_traced((12, 6, 4, 2), steps=5)
    balanced = straggler.run_traced((6, 6, 6, 6), steps=5)
    waits = straggler.median_waits(uneven.values)
    # the rank with the biggest shard arrives last: it waits least; every other rank waits for it
    assert waits.index(min(waits)) == 0, waits
    assert all(w > 0 for w in waits[1:]), waits
    # the smallest shard waits longer than the middle one (2 units vs 6 units of compute)
    assert waits[3] > waits[1], waits
    # spans and returned numbers agree
    assert [sum(v["wait_s"]) for v in uneven.values] == pytest.approx(straggler.wait_by_rank(uneven.spans), abs=1e-9)
    # balancing the shards cuts the worst wait at the collective
    assert straggler.median_worst_wait(balanced.values) < straggler.median_worst_wait(uneven.values)
    # the all-reduce result is the same everywhere (1+2+3+4)
    assert {v["result"] for v in uneven.values} == {10.0}
    kinds = {s.kind for spans in uneven.spans for s in spans}
    assert {"compute", "wait", "communicate"} <= kinds


def test_median_waits_ignore_one_stalled_step():
    # rank 1 waits 30 ms a step for rank 0, except one step where rank 0 arrived late (stalled): a sum would
    # call that step's 200 ms wait typical; the median does not.
    values = [dict(wait_s=[0.0, 0.0, 0.0, 0.0, 0.0]), dict(wait_s=[0.03, 0.03, 0.2, 0.03, 0.03])]
    assert straggler.median_waits(values) == [0.0, 0.03]
    assert straggler.median_worst_wait(values) == 0.03
    assert straggler.median_worst_wait([dict(wait_s=[0.05, 0.0, 0.01]), dict(wait_s=[0.0, 0.02, 0.0])]) == 0.02


def test_draw_timeline_draws_one_bar_per_span_and_labels_waits():
    spans = [[Span("compute", "c", 0.0, 0.12), Span("wait", "w", 0.12, 0.12), Span("communicate", "a", 0.12, 0.13)],
             [Span("compute", "c", 0.0, 0.02), Span("wait", "w", 0.02, 0.12), Span("communicate", "a", 0.12, 0.13)]]
    fig = straggler.draw_timeline(spans)
    ax = fig.axes[0]
    assert len(ax.patches) == 5          # zero-length wait of rank 0 is not drawn
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["wait 0.0 ms", "wait 100.0 ms"]
    fig2 = straggler.draw_comparison({"a": spans, "b": spans})
    assert len(fig2.axes) == 2


def test_parse_shards_accepts_slashes_and_rejects_nonsense():
    assert straggler.parse_shards("12/6/4/2") == (12, 6, 4, 2)
    with pytest.raises(ValueError):
        straggler.parse_shards("12/-1")
    with pytest.raises(ValueError):
        straggler.parse_shards("")


def test_show_straggler_builds_controls():
    box = straggler.show_straggler()
    assert box.children[0].children[0].value == "12/6/4/2"


def test_compute_units_is_deterministic_and_bounded():
    import torch

    from mgpu_helpers.measure import workloads
    cpu = torch.device("cpu")
    a = workloads.compute_units(1, cpu, m=16, per_unit=50)
    b = workloads.compute_units(1, cpu, m=16, per_unit=50)
    assert torch.equal(a, b)
    assert torch.allclose(a, torch.full((4,), 2.0))          # y <- 0.5 y + 1 converges to 2
    assert torch.equal(workloads.compute_units(0, cpu, m=16, seed=3), torch.full((4,), 3.0))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")
