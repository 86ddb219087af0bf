"""The learner's own code, kept for the notebooks that build on it: 04's ``exchange`` feeds 05.

When a fill-in that a later notebook uses passes its check (:func:`mgpu_helpers.checks.core.fill_in` with
``keep=``), :func:`save` writes the function's source (IPython keeps every cell's source, so
``inspect.getsource`` works on a cell-defined function) to one file per name in :func:`store_dir`; a later
notebook, in its own kernel session and with no command in between, calls :func:`mine`::

    exchange = mh.mine("exchange", fallback=mh.lessons.p2p.exchange)

which prints, in Chinese, whose version it uses. Loading is safe: a stored source that no longer imports, or
that fails its own check again (the checker that accepted it is named in the file and run once more, quietly),
gives the fallback with a sentence saying why; it never stops the notebook.

Where the files live: ``$MGPU_OWN_CODE_DIR`` if set (tests use a temporary folder), else ``build/mine/`` under
the course's root (the folder holding ``mgpu_helpers/``; ``build/`` is git-ignored) when it is writable, else
``~/.cache/mgpu-course/mine/``.
"""

import contextlib
import importlib
import inspect
import io
import os
import re
import textwrap
from pathlib import Path

ENV_DIR = "MGPU_OWN_CODE_DIR"
# Imports every stored function may rely on (a notebook has them at its top): the source is kept as written.
PRELUDE = "import numpy as np\nimport torch\nimport torch.distributed as dist\n\nimport mgpu_helpers as mh\n"
_HEADER = re.compile(r"^# mgpu-own-code: name=(?P<name>\w+) lesson=(?P<lesson>[\w-]*) check=(?P<check>[\w.]*)$", re.M)


def store_dir() -> Path:
    """The folder of the stored functions (made on first use); see the module's docstring."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    root = Path(__file__).resolve().parents[1]
    if os.access(root, os.W_OK) and (root / "mgpu_helpers").is_dir():
        return root / "build" / "mine"
    return Path.home() / ".cache" / "mgpu-course" / "mine"


def _path(name: str) -> Path:
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"name must be a Python identifier, not {name!r}")
    return store_dir() / f"{name}.py"


def save(name: str, fn, lesson: str = "", check=None) -> Path | None:
    """Keep ``fn``'s source as ``name`` (``lesson``: the notebook it was written in, for the message;
    ``check``: the checker that accepted it, run again when it is loaded). Returns the file, or ``None``
    when the source cannot be read (a function typed at a bare console) or the folder is not writable."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    check_name = f"{check.__module__}.{check.__qualname__}" if check is not None else ""
    if "<" in check_name:  # a checker defined inside a function cannot be found again
        check_name = ""
    text = (
        f"# mgpu-own-code: name={name} lesson={lesson} check={check_name}\n"
        f"# {fn.__name__}, as written in notebook {lesson or '?'}; kept by mgpu_helpers.own_code.\n"
        f"{PRELUDE}\n\n{source}"
    )
    if fn.__name__ != name:
        text += f"\n\n{name} = {fn.__name__}\n"
    path = _path(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError:
        return None
    return path


def _load(path: Path, name: str):
    """The function ``name`` from a stored file, defined in a fresh namespace (by value when sent to ranks)."""
    text = path.read_text(encoding="utf-8")
    ns = {"__name__": f"mgpu_own_code_{name}", "__file__": str(path)}
    exec(compile(text, str(path), "exec"), ns)
    fn = ns.get(name)
    if not callable(fn):
        raise NameError(f"{name} is not defined in {path}")
    return fn, _HEADER.search(text)


def _recheck(fn, header) -> None:
    """Run the checker named in the file's header on ``fn`` again, its printing held back."""
    dotted = header["check"] if header else ""
    if not dotted:
        return
    module, _, attr = dotted.rpartition(".")
    check = getattr(importlib.import_module(module), attr)
    with contextlib.redirect_stdout(io.StringIO()):
        check(fn)


def mine(name: str, fallback, lesson: str = ""):
    """The learner's stored ``name`` if it still loads and passes its check, else ``fallback``; prints which.

    ``lesson``: the notebook it comes from, for the message when nothing is stored yet (the stored file
    names its own notebook)."""
    path = _path(name)
    if not path.exists():
        print(
            f"{lesson + ' 的 ' if lesson else ''}{name} 还没通过检查，先用课程的版本。"
            f"（在 {lesson or '前面的'} 笔记本里写好 {name} 并通过检查后，这里就会用你的。）"
        )
        return fallback
    try:
        fn, header = _load(path, name)
        lesson = (header["lesson"] if header else "") or lesson
        _recheck(fn, header)
    except Exception as exc:  # a file that no longer imports or no longer passes: never stop here
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"存下的 {name}（{path}）这次没能用上：{first[:200]}。先用课程的版本。")
        return fallback
    print(f"用的是你在 {lesson or '前面'} 写的 {name}。")
    return fn
