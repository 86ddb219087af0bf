"""The runs notebook 10 reads: waiting shows inside the all-reduce of the early ranks, the scaling probes
measure every configuration alone and shared in one launch, NCCL's transports are read from its lines."""

import statistics

import mgpu_helpers as mh
from mgpu_helpers.measure import diagnose, straggler


def test_without_a_barrier_the_early_ranks_wait_inside_the_all_reduce():
    shards = (1.0, 3.0, 1.0)
    res = straggler.run_waiting_inside(shards, steps=4, seconds_per_unit=0.02, grad_numel=1 << 12)
    coll = [statistics.median(v["comm_s"]) for v in res.values]
    comp = [statistics.median(v["compute_s"]) for v in res.values]
    assert min(range(3), key=coll.__getitem__) == 1  # the late rank's collective is the short one
    for r in (0, 2):  # the others waited about the compute difference
        assert coll[r] - coll[1] > 0.5 * (comp[1] - comp[r])
    assert all({"compute", "communicate"} <= {s.kind for s in spans} for spans in res.spans)


def test_scaling_probes_give_the_alone_and_shared_step_of_every_configuration():
    configs = {"a": (0.1, 1 << 10), "b": (0.2, 1 << 12)}
    res = mh.run_ranks(diagnose.scaling_probes, 2, args=(configs, 2), stream=False, quiet=True)
    for v in res.values:
        assert set(v) == set(configs)
        for name in configs:
            assert {"alone_s", "compute_s", "comm_s", "step_s"} <= set(v[name]) and v[name]["alone_s"] > 0
    names = {s.name.split(" ")[0] for spans in res.spans for s in spans}
    assert names == set(configs)  # the shared steps' spans, named by configuration
