"""Progress bars for the loops a learner waits on: ``tqdm.auto``, an ipywidgets bar in a notebook and a text bar
in a terminal (the static export shows the bar's last text)."""

import sys


def bar(total: int, desc: str = ""):
    """A ``tqdm.auto`` bar of ``total`` steps; text bars go to stdout (the cell's output, the terminal)."""
    from tqdm.auto import tqdm

    # ascii: '#' blocks, readable in every font, log file and static page
    return tqdm(total=total, desc=desc, file=sys.stdout, ascii=True, dynamic_ncols=False, ncols=80)


def iterate(items, desc: str = ""):
    """Yield from ``items`` while a bar counts them."""
    items = items if hasattr(items, "__len__") else list(items)
    with bar(len(items), desc) as b:
        for item in items:
            yield item
            b.update(1)


def callback(progress, desc: str = "progress"):
    """``(update, close)`` for a ``progress`` argument: None/False no bar, True or a description a tqdm bar."""
    if progress is None or progress is False:
        return (lambda done, total: None), (lambda: None)
    if progress is not True and not isinstance(progress, str):
        raise TypeError(f"progress must be None, True or a description; got {type(progress).__name__}")
    label = desc if progress is True else progress
    made = []  # the bar, once the first update knows its total

    def update(done: int, total: int) -> None:
        if not made:
            made.append(bar(total, label))
        made[0].total = total
        made[0].update(done - made[0].n)

    def close() -> None:
        for b in made:
            b.close()

    return update, close
