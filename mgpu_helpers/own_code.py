"""The learner's own code, kept for the notebooks that build on it (how: the README's table). A stored source that
no longer imports or passes its check (run again, quietly) gives the fallback."""

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


def _path(name: str) -> Path:
    """In ``$MGPU_OWN_CODE_DIR``, else ``build/mine/`` of the checkout (git-ignored) where writable, else the cache."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"name must be a Python identifier, not {name!r}")
    root = Path(__file__).resolve().parents[1]
    if os.environ.get(ENV_DIR):
        folder = Path(os.environ[ENV_DIR])
    elif os.access(root, os.W_OK) and (root / "mgpu_helpers").is_dir():
        folder = root / "build" / "mine"
    else:
        folder = Path.home() / ".cache" / "mgpu-course" / "mine"
    return folder / f"{name}.py"


def save(name: str, fn, lesson: str = "", check=None) -> Path | None:
    """Keep ``fn``'s source as ``name`` (``check``: the checker that accepted it, run again on loading). Returns
    the file, or ``None`` where the source cannot be read (a bare console) or the folder is not writable."""
    check_name = f"{check.__module__}.{check.__qualname__}" if check is not None else ""
    check_name = "" if "<" in check_name else check_name  # a checker defined inside a function cannot be found again
    head = f"# mgpu-own-code: name={name} lesson={lesson} check={check_name}\n"
    head += f"# {fn.__name__}, as written in notebook {lesson or '?'}; kept by mgpu_helpers.own_code.\n"
    alias = f"\n\n{name} = {fn.__name__}\n" if fn.__name__ != name else ""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        path = _path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{head}{PRELUDE}\n\n{source}{alias}", encoding="utf-8")
    except (OSError, TypeError):
        return None
    return path


def mine(name: str, fallback, lesson: str = ""):
    """The learner's stored ``name`` if it still loads and passes its check, else ``fallback``; prints which."""
    path = _path(name)
    if not path.exists():
        first = f"{lesson + ' 的 ' if lesson else ''}{name} 还没通过检查，先用课程的版本。"
        print(first + f"（在 {lesson or '前面的'} 笔记本里写好 {name} 并通过检查后，这里就会用你的。）")
        return fallback
    try:
        # Defined in a fresh namespace (sent to ranks by value), then its checker runs again, printing held back.
        text = path.read_text(encoding="utf-8")
        ns = {"__name__": f"mgpu_own_code_{name}", "__file__": str(path)}
        exec(compile(text, str(path), "exec"), ns)
        fn, header = ns.get(name), _HEADER.search(text)
        if not callable(fn):
            raise NameError(f"{name} is not defined in {path}")
        lesson = (header["lesson"] if header else "") or lesson
        if header and header["check"]:
            module, _, attr = header["check"].rpartition(".")
            with contextlib.redirect_stdout(io.StringIO()):
                getattr(importlib.import_module(module), attr)(fn)
    except Exception as exc:  # a file that no longer imports or no longer passes: never stop here
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"存下的 {name}（{path}）这次没能用上：{first[:200]}。先用课程的版本。")
        return fallback
    print(f"用的是你在 {lesson or '前面'} 写的 {name}。")
    return fn
