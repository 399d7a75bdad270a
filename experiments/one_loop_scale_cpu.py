"""CPU (process) time of one activation-layer call on bench_scaling's synthetic memory:
python scale_cpu.py N B PATH REPEATS (PYTHONPATH picks the code). Memory cached in /tmp."""

import json
import os
import resource
import sys
import time

import torch

torch.set_num_threads(1)
n, b, path, reps = int(float(sys.argv[1])), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
cache = f"/tmp/one_loop_mem_{n}.pt"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
if os.path.exists(cache):
    ei, w = torch.load(cache)
else:
    from bench_scaling import synthetic_memory

    ei, w = synthetic_memory(n, 0)
    torch.save((ei, w), cache)
from bench_scaling import ANCHORS  # noqa: E402 (after the scripts path)

from synapse_pt.retrieval.settings import STORAGE, SynapseParams  # noqa: E402
from synapse_pt.retrieval.spreading import activation_layer  # noqa: E402

g = torch.Generator().manual_seed(1)
a0 = torch.zeros(n, b)
a0[torch.randint(0, n, (ANCHORS, b), generator=g), torch.arange(b)] = torch.rand(
    ANCHORS, b, generator=g
)
p = SynapseParams()
hyper = dict(S=p.S, delta=p.delta, beta=p.beta, gamma=p.gamma, theta=p.theta)
try:  # the layer takes its hyperparameters as one Hyperparams (issue 60); before, as keywords
    from synapse_pt.nn import Hyperparams  # noqa: E402

    hyper = {"hyper": Hyperparams(**hyper)}
except ImportError:
    pass
layer = activation_layer(p, **dict(STORAGE, frontier=path))
with torch.no_grad():
    layer(a0, ei, w, **hyper)  # warm-up
    cpu, wall = [], []
    for _ in range(reps):
        c, t = time.process_time(), time.perf_counter()
        out = layer(a0, ei, w, **hyper)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
print(
    json.dumps(
        {
            "n": n,
            "b": b,
            "path": path,
            "cpu_min": min(cpu),
            "cpu_all": cpu,
            "wall_min": min(wall),
            "maxrss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    )
)
