"""Replay pytest-xdist 3.8's LoadScheduling (``-n 2``, dist=load) with the per-test durations of a
``pytest --durations=0`` log: the makespan of the collection order at 4dc6122 with xdist's default
chunks against tests/conftest.py's order (long tests first) with ``--maxschedchunk 1``. A model:
no dispatch latency, no start-up, no contention between the workers; tests the log does not list
count 5 ms. experiments/suite_time.md has its use.

    python experiments/suite_schedule.py LOG ORDER_BEFORE ORDER_AFTER

ORDER_*: ``pytest --collect-only -q`` of each checkout, the node ids one a line.
"""
import re
import sys
from collections import defaultdict


def durations(log):
    d = defaultdict(float)
    with open(log) as f:
        lines = f.readlines()
    for line in lines:
        m = re.match(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+)", line)
        if m:
            d[m.group(3)] += float(m.group(1))
    return d

def simulate(order, dur, maxschedchunk=None, nodes=2):
    pending = list(range(len(order)))
    chunk = maxschedchunk or len(order)
    node_pending = [[] for _ in range(nodes)]
    def send(n, k):
        node_pending[n].extend(pending[:k])
        del pending[:k]
    per_node = len(order) // nodes
    for n in range(nodes):
        send(n, max(min(per_node // 4, chunk), 2))
    t = [0.0] * nodes
    while any(node_pending):
        # the node that finishes its current test first
        n = min((i for i in range(nodes) if node_pending[i]),
                key=lambda i: t[i] + dur(order[node_pending[i][0]]))
        d = dur(order[node_pending[n].pop(0)])
        t[n] += d
        if pending:
            mn = max(2, len(pending) // nodes // 4)
            mx = max(2, len(pending) // nodes // 2)
            p = len(node_pending[n])
            if p < mn and not (d >= 0.1 and p >= 2):
                send(n, min(mx - p, max(2 - p, chunk)))
        # an idle node with nothing pending gets work at once
        for i in range(nodes):
            if not node_pending[i] and pending:
                t[i] = max(t[i], t[n])
                send(i, min(max(2, len(pending) // nodes // 2), max(2, chunk)))
    return max(t), t

log = sys.argv[1]
d = durations(log)
def dur(nodeid):
    return d.get(nodeid, 0.005)


with open(sys.argv[2]) as f:
    before = [line.strip() for line in f]
with open(sys.argv[3]) as f:
    after = [line.strip() for line in f]
total = sum(dur(x) for x in before)
print(f"{log}: summed {total:.0f} s, ideal 2-worker makespan {total/2:.0f} s")
for name, order, chunk in (("old order, default chunks", before, None),
                           ("old order, maxschedchunk 1", before, 1),
                           ("new order, default chunks", after, None),
                           ("new order, maxschedchunk 1", after, 1)):
    mk, t = simulate(order, dur, chunk)
    print(f"  {name:28s} makespan {mk:6.0f} s  (workers {t[0]:.0f} / {t[1]:.0f})")
