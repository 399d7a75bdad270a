"""The machine's own limits: matrix-product GFLOP/s on the encoder's shapes and memory bandwidth.

    .venv/bin/python scripts/bench_limits.py [--seconds 0.3] [--repeats 7] [--json FILE]
    .venv/bin/python scripts/bench_limits.py --device cuda      # the same on a GPU, when lent

What each hot path of the framework would do at the ceiling that binds it is counted from these
figures in ``experiments/limits.md``. Measured here:

* **matrix products** on the shapes the encoder's fixed-shape calls run, the weights laid out as
  ``nn.Linear`` keeps them (``[out, in]``, used transposed: PyTorch's emulated bfloat16 product
  is 7x faster that way than on a ``[in, out]`` copy) (all-MiniLM-L6-v2:
  ``d = 384``, feed-forward ``4d = 1,536``, 12 heads of 32; a call holds ``call_tokens = 256``
  positions): the projections ``[256, 384] x [384, 384]``, the feed-forward products ``[256, 384]
  x [384, 1,536]`` and ``[256, 1,536] x [1,536, 384]``, and attention's batched products for a
  256-token window and for a call of 8 turn-sized rows of 32 tokens; each in float32, bfloat16
  and float64 (the cosine of retrieval runs in float64), in PyTorch on

  - ``1 thread``: one product, one intra-op thread;
  - ``all, 1 each``: one product per core at once, each on one intra-op thread (how the encoder
    runs its calls: a pool of worker threads, :mod:`synapse_pt.models.embedder`);
  - ``all, shared``: one product at a time on PyTorch's intra-op pool of all cores;

  and the float32 products in ONNX Runtime (a one-node ``MatMul`` graph, weights as an
  initializer; a session of one intra-op thread, and one session per core at once). ONNX
  Runtime's CPU provider has no bfloat16 ``MatMul``: the script says so if the session refuses.
* the **encoder layer** at each setting: the FLOP-weighted rate of one layer's products (the
  time of a layer's products is the sum of each product's FLOPs over its rate), for a window
  call (1 x 256) and for a turn call (8 x 32); the element-wise work between them (layer norms,
  GELU, softmax) is not counted, so this is the ceiling of the products alone;
* **memory bandwidth**: ``copy`` (read and write, 2 bytes moved per byte), ``read`` (a sum) and
  ``triad`` (``a = b + s c``, 3) over ``--mib`` MiB arrays (beyond every cache), and ``copy`` over a
  cache-resident 8 MiB array (the sweep's blocks are sized to stay in L3), on one thread and on
  all.

Each figure is the best of ``--repeats`` timed runs of at least ``--seconds`` each (the best,
because on a shared machine every slower run is another job's time; the median is printed
beside it). ``--cpu-time`` divides by the process's CPU time over the cores used instead of the
wall clock: on a loaded machine the wall clock counts the time other jobs hold the cores, the
CPU time does not (it still counts what they do to the caches and the memory bus). The load
average before and after is printed. The last line is the headline:
``matmul_fp32_encoder_all_cores: <GFLOP/s> GFLOP/s`` (the float32 encoder-layer rate of a window
call with one product per core, PyTorch), the ceiling the encoder works against.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

D, FF, HEADS, LAYERS, CALL_TOKENS = 384, 1536, 12, 6, 256
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}
CPU_TIME = False  # --cpu-time: rates per CPU-second of the cores used, not per wall second


def products(rows: int, length: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], int]]:
    """One encoder layer's products in a call of ``rows x length`` tokens: name -> (left shape,
    right shape, how many of them a layer runs)."""
    t, hd = rows * length, D // HEADS
    return {
        "projection [t, 384] x [384, 384]": ((t, D), (D, D), 4),  # Q, K, V, output
        "ffn up [t, 384] x [384, 1536]": ((t, D), (D, FF), 1),
        "ffn down [t, 1536] x [1536, 384]": ((t, FF), (FF, D), 1),
        f"attention scores [{rows * HEADS}, {length}, 32] x [32, {length}]":
            ((rows * HEADS, length, hd), (rows * HEADS, hd, length), 1),
        f"attention values [{rows * HEADS}, {length}, {length}] x [{length}, 32]":
            ((rows * HEADS, length, length), (rows * HEADS, length, hd), 1),
    }


def flops(left: tuple[int, ...], right: tuple[int, ...]) -> int:
    """2 m k n per product (a batch of them for 3-d shapes)."""
    batch = left[0] if len(left) == 3 else 1
    return 2 * batch * left[-2] * left[-1] * right[-1]


def layer_flops(rows: int, length: int) -> int:
    """FLOPs of one encoder layer's products for a call of ``rows x length`` tokens."""
    return sum(n * flops(a, b) for a, b, n in products(rows, length).values())


def best_rate(fn: Callable[[], object], work: float, seconds: float, repeats: int,
              cores: int = 1) -> tuple[float, float]:
    """``(best, median)`` of ``work / time`` over ``repeats`` runs of ``fn``, each repeated for at
    least ``seconds``; one untimed warm-up run. With :data:`CPU_TIME` the time is the process's
    CPU time over the ``cores`` it ran on (what the cores did while they held the work; on a
    shared machine it leaves out the time other jobs held them), else the wall clock."""
    fn()
    rates = []
    for _ in range(repeats):
        count, start, cpu = 0, time.perf_counter(), time.process_time()
        while True:
            fn()
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        if CPU_TIME:
            elapsed = (time.process_time() - cpu) / cores
        rates.append(work * count / elapsed)
    return max(rates), statistics.median(rates)


def in_parallel(make: Callable[[int], Callable[[], object]], workers: int
                ) -> Callable[[], object]:
    """A function that runs ``make(i)()`` for ``i < workers`` at once on a thread pool (PyTorch
    and ONNX Runtime release the GIL in their kernels)."""
    pool = ThreadPoolExecutor(max_workers=workers)
    fns = [make(i) for i in range(workers)]

    def run() -> None:
        list(pool.map(lambda f: f(), fns))

    return run


def torch_product(left: tuple[int, ...], right: tuple[int, ...], dtype: torch.dtype,
                  device: str, seed: int = 0) -> Callable[[], object]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*left, generator=g).to(device=device, dtype=dtype)
    if len(right) == 2:  # a weight as nn.Linear keeps it, [out, in], used transposed
        b = torch.randn(*right[::-1], generator=g).to(device=device, dtype=dtype).t()
    else:
        b = torch.randn(*right, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(*left[:-1], right[-1], device=device, dtype=dtype)
    if device.startswith("cuda"):
        return lambda: (torch.matmul(a, b, out=out), torch.cuda.synchronize())
    return lambda: torch.matmul(a, b, out=out)


def onnx_product(left: tuple[int, ...], right: tuple[int, ...], folder: Path, threads: int,
                 dtype: str = "float32", seed: int = 0) -> Callable[[], object]:
    """``left @ right`` as a one-node ONNX graph (``right`` an initializer, as weights are), run
    by ONNX Runtime's CPU provider on ``threads`` intra-op threads."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    elem = {"float32": TensorProto.FLOAT, "bfloat16": TensorProto.BFLOAT16}[dtype]
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal(right).astype(np.float32)
    init = numpy_helper.from_array(weight, "W")
    if dtype == "bfloat16":
        init = helper.make_tensor("W", elem, right, weight.ravel().tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "W"], ["Y"])], "matmul",
        [helper.make_tensor_value_info("A", elem, list(left))],
        [helper.make_tensor_value_info("Y", elem, [*left[:-1], right[-1]])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / f"matmul_{'x'.join(map(str, left))}_{'x'.join(map(str, right))}_{dtype}.onnx"
    onnx.save(model, str(path))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"A": rng.standard_normal(left).astype(np.float32)}
    return lambda: session.run(None, feed)


def cpu_facts() -> dict[str, object]:
    """What the machine is: model name, usable cores, the vector instructions that matter here."""
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni")
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)),
            "flags": {f: f in flags for f in wanted},
            "torch": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkldnn_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


def stream_ops(n: int, device: str) -> dict[str, tuple[Callable[[], object], int]]:
    """The bandwidth kernels over three ``n``-element float32 arrays: name -> (run it, bytes
    moved per element)."""
    a, b, c = (torch.rand(n, device=device) for _ in range(3))

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return {"copy": (lambda: (a.copy_(b), sync()), 2 * 4),
            "read": (lambda: (b.sum(), sync()), 4),
            "triad": (lambda: (torch.add(b, c, alpha=0.5, out=a), sync()), 3 * 4)}


def bandwidth(mib: int, seconds: float, repeats: int, device: str) -> list[dict[str, object]]:
    """GB/s of copy, read and triad over ``mib`` MiB float32 arrays, and of a cache-resident
    8 MiB copy (PyTorch's kernels; on the CPU with one thread and with all)."""
    out = []
    settings = [("1 thread", 1), ("all", torch.get_num_threads())] if device == "cpu" else \
        [("device", None)]
    for size_mib, kinds in ((mib, ("copy", "read", "triad")), (8, ("copy",))):
        n = size_mib * 2**20 // 4
        ops = stream_ops(n, device)
        for label, count in settings:
            if count is not None:
                torch.set_num_threads(count)
            for kind in kinds:
                fn, moved = ops[kind]
                best, median = best_rate(fn, moved * n / 1e9, seconds, repeats,
                                         cores=count or 1)
                out.append({"what": f"{kind} {size_mib} MiB", "threads": label,
                            "GB/s": best, "GB/s median": median})
                print(f"  {kind:5s} {size_mib:4d} MiB, {label:8s}: {best:7.1f} GB/s "
                      f"(median {median:.1f})", flush=True)
        del ops
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=0.3, help="least time of one run")
    parser.add_argument("--repeats", type=int, default=7, help="runs per figure (best kept)")
    parser.add_argument("--mib", type=int, default=256, help="array size of the bandwidth runs")
    parser.add_argument("--dtypes", default="float32,bfloat16,float64")
    parser.add_argument("--no-onnx", action="store_true", help="skip ONNX Runtime")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--cpu-time", action="store_true",
                        help="rates per CPU-second of the cores used (a loaded machine)")
    args = parser.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu_time
    device = args.device
    cores = len(os.sched_getaffinity(0))
    facts = cpu_facts() if device == "cpu" else {
        "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__}
    facts["load_before"] = os.getloadavg()
    facts["clock"] = "CPU time" if CPU_TIME else "wall"
    print(json.dumps(facts))
    calls = {"window 1 x 256": (1, 256), "turns 8 x 32": (8, 32)}
    settings = [("1 thread", 1, 1), (f"all, 1 each ({cores})", 1, cores),
                (f"all, shared ({cores})", cores, 1)] if device == "cpu" else \
        [("device", None, 1)]
    rows: list[dict[str, object]] = []
    print("matrix products (GFLOP/s, best of runs; median in brackets):")
    for dtype_name in args.dtypes.split(","):
        dtype = DTYPES[dtype_name]
        for label, intra, workers in settings:
            if intra is not None:
                torch.set_num_threads(intra)
            for call, (r, length) in calls.items():
                seconds_per_layer = 0.0
                for name, (left, right, n) in products(r, length).items():
                    work = flops(left, right) / 1e9
                    fn = (torch_product(left, right, dtype, device) if workers == 1 else
                          in_parallel(lambda i, a=left, b=right, t=dtype: torch_product(
                              a, b, t, device, seed=i), workers))
                    best, median = best_rate(fn, work * workers, args.seconds, args.repeats,
                                             cores=max(workers, intra or 1))
                    seconds_per_layer += n * work / best
                    rows.append({"runtime": "torch", "dtype": dtype_name, "threads": label,
                                 "call": call, "product": name, "GFLOP/s": best,
                                 "GFLOP/s median": median})
                    print(f"  torch {dtype_name:8s} {label:16s} {call:14s} {name:44s} "
                          f"{best:8.1f} ({median:.1f})", flush=True)
                layer = layer_flops(r, length) / 1e9 / seconds_per_layer
                rows.append({"runtime": "torch", "dtype": dtype_name, "threads": label,
                             "call": call, "product": "encoder layer", "GFLOP/s": layer})
                print(f"  torch {dtype_name:8s} {label:16s} {call:14s} {'= encoder layer':44s} "
                      f"{layer:8.1f}", flush=True)
    if device == "cpu" and not args.no_onnx:
        folder = Path(tempfile.mkdtemp(prefix="bench_limits_"))
        try:
            onnx_product((CALL_TOKENS, D), (D, FF), folder, 1, "bfloat16")()
            print("  onnxruntime bfloat16: a MatMul session runs (measure it with "
                  "--dtypes)")
        except Exception as err:  # noqa: BLE001 - report what the runtime says, then go on
            print(f"  onnxruntime bfloat16 MatMul: refused by the CPU provider "
                  f"({type(err).__name__}: {str(err).splitlines()[0][:160]})")
        torch.set_num_threads(1)
        for label, workers in (("1 thread", 1), (f"all, 1 each ({cores})", cores)):
            for call, (r, length) in calls.items():
                seconds_per_layer = 0.0
                for name, (left, right, n) in products(r, length).items():
                    work = flops(left, right) / 1e9
                    fn = (onnx_product(left, right, folder, 1) if workers == 1 else
                          in_parallel(lambda i, a=left, b=right: onnx_product(
                              a, b, folder, 1, seed=i), workers))
                    best, median = best_rate(fn, work * workers, args.seconds, args.repeats,
                                             cores=workers)
                    seconds_per_layer += n * work / best
                    rows.append({"runtime": "onnxruntime", "dtype": "float32",
                                 "threads": label, "call": call, "product": name,
                                 "GFLOP/s": best, "GFLOP/s median": median})
                    print(f"  onnx  float32  {label:16s} {call:14s} {name:44s} "
                          f"{best:8.1f} ({median:.1f})", flush=True)
                layer = layer_flops(r, length) / 1e9 / seconds_per_layer
                rows.append({"runtime": "onnxruntime", "dtype": "float32", "threads": label,
                             "call": call, "product": "encoder layer", "GFLOP/s": layer})
                print(f"  onnx  float32  {label:16s} {call:14s} {'= encoder layer':44s} "
                      f"{layer:8.1f}", flush=True)
    torch.set_num_threads(cores)
    print(f"memory bandwidth ({args.mib} MiB arrays, and 8 MiB in cache):")
    bw = bandwidth(args.mib, args.seconds, args.repeats, device)
    facts["load_after"] = os.getloadavg()
    print(f"load average (1, 5, 15 min): before {facts['load_before']}, after "
          f"{facts['load_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"facts": facts, "products": rows, "bandwidth": bw,
                                         "layer_flops": {c: layer_flops(*s) for c, s in
                                                         calls.items()}}, indent=1) + "\n")
    head = next(r for r in rows if r["runtime"] == "torch" and r["dtype"] == "float32"
                and r["threads"] == settings[-2 if device == "cpu" else 0][0]
                and r["call"] == "window 1 x 256" and r["product"] == "encoder layer")
    print(f"matmul_fp32_encoder_all_cores: {head['GFLOP/s']:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
