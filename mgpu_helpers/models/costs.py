"""Fitting an alpha-beta cost model (notebook 08's, passed in) to measured times; ``nbytes`` as nccl-tests counts it."""


def ring_terms(cost, nbytes: float, world_size: int) -> tuple[float, float]:
    """(multiplier of alpha, of beta) in ``cost``: it is linear in both, so its value at (1, 0) and (0, 1)."""
    return cost(nbytes, world_size, 1.0, 0.0), cost(nbytes, world_size, 0.0, 1.0)


def fit_alpha_beta(cost, nbytes: list, seconds: list, world_size: int, relative: bool = False) -> tuple[float, float]:
    """Least-squares ``(alpha, beta)`` of ``cost`` for ``seconds`` measured at sizes ``nbytes``; ``relative``: small
    messages (latency) count as much as big ones (bandwidth). Negative estimates (noise) are clipped to 0."""
    if world_size < 2:
        raise ValueError("fitting needs world_size >= 2 ranks: with one rank nothing is sent")
    if len(nbytes) != len(seconds) or len(set(nbytes)) < 2:
        raise ValueError("need matching lists with at least two different message sizes")
    rows = [ring_terms(cost, b, world_size) for b in nbytes]
    if relative:  # divide each equation by its measured time: t/t = 1 = a x/t + b y/t
        rows = [(x / t, y / t) for (x, y), t in zip(rows, seconds)]
        seconds = [1.0] * len(seconds)
    # Normal equations of t = a * x + b * y (two unknowns, no intercept).
    sxx = sum(x * x for x, _ in rows)
    sxy = sum(x * y for x, y in rows)
    syy = sum(y * y for _, y in rows)
    sxt = sum(x * t for (x, _), t in zip(rows, seconds))
    syt = sum(y * t for (_, y), t in zip(rows, seconds))
    det = sxx * syy - sxy * sxy
    alpha = (sxt * syy - syt * sxy) / det
    beta = (syt * sxx - sxt * sxy) / det
    if alpha < 0:  # refit beta alone through the origin
        alpha, beta = 0.0, syt / syy
    if beta < 0:
        alpha, beta = sxt / sxx, 0.0
    return alpha, beta
