"""The knowledge map of chapter 2: three columns in the seed's order, every topic placed, a figure that renders."""

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure

from mgpu_helpers.widgets import knowledge_map as km
from mgpu_helpers.widgets import style


def test_columns_go_from_cuda_to_tools_to_communication():
    titles = [t for t, _c, _ts in km.KNOWLEDGE_MAP]
    assert len(titles) == 3
    assert titles[0].startswith("CUDA") and titles[1].startswith("torch.distributed")
    assert titles[2].startswith("communication")


def test_every_topic_names_a_notebook_of_part_a():
    topics = km.topics()
    assert len(topics) >= 12
    assert {nb for _t, _topic, nb in topics} == {"01", "02", "03", "04", "05"}
    names = " ".join(topic for _t, topic, _nb in topics)
    for term in (
        "Kernel",
        "init_process_group",
        "send",
        "All-Reduce",
        "All-Gather",
        "Reduce-Scatter",
        "Broadcast",
        "nccl",
        "gloo",
        "env://",
        "torchrun",
        "busbw",
    ):
        assert term in names, term


def test_no_column_is_taller_than_the_drawing_has_room_for():
    # Five rows fit between the column titles and the footer line of the figure.
    assert max(len(ts) for _t, _c, ts in km.KNOWLEDGE_MAP) <= 5


def test_draw_knowledge_map_renders_in_normal_and_projection_mode():
    for projection in (False, True):
        style.set_projection(projection)
        try:
            fig = km.draw_knowledge_map(highlight=1 if projection else None)
            assert isinstance(fig, Figure)
            fig.canvas.draw()
            texts = [t.get_text() for t in fig.axes[0].texts]
            assert any("torch.distributed" in t for t in texts)
        finally:
            style.set_projection(False)
