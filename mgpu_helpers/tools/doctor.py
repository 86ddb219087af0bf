"""``python -m mgpu_helpers.tools.doctor``: check that the course's packages import, and say what this machine is."""

import importlib
import os
import platform
import sys

PACKAGES = ["torch", "numpy", "numba", "numba.cuda", "cupy", "matplotlib", "ipywidgets", "cloudpickle", "psutil"]
PACKAGES += ["pynvml", "tqdm"]
# Left out on purpose where they cannot run: CuPy has no macOS build (it needs CUDA).
OPTIONAL = {"cupy": lambda: platform.system() != "Linux"}


def main() -> int:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # importing numba.cuda must not need a driver
    bad = 0
    for name in PACKAGES:
        try:
            mod = importlib.import_module(name)
            print(f"  ok    {name:12s} {getattr(mod, '__version__', '')}")
        except Exception as exc:
            if isinstance(exc, ModuleNotFoundError) and name in OPTIONAL and OPTIONAL[name]():
                print(f"  --    {name:12s} not installed on {platform.system()}: its cells say they need an NVIDIA GPU")
                continue
            bad += 1
            print(f"  FAIL  {name:12s} {type(exc).__name__}: {exc}")
    import numpy

    if tuple(int(x) for x in numpy.__version__.split(".")[:2]) >= (2, 5):
        bad += 1
        print("  FAIL  numpy >= 2.5: numba-cuda 0.30.4 does not import under it; install numpy<2.5")
    from mgpu_helpers import hardware

    m = hardware.detect()
    print(f"  mode  {m.mode} ({m.gpu_count} GPU(s){'; ' + m.note if m.note else ''})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
