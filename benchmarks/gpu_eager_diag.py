"""Why eager generate() is slower than `softfp8-bench calls` says: inside generate() of a
llama2-7b-shaped model (DIAG_LAYERS, default 4; DIAG_FORMATS, default fp16,e5m2,nvfp4;
DIAG_PROFILE=0 skips the profile), count the recorded calls replayed, the replays refused (and
why) and the recordings made, then profile 32 tokens (cProfile, by own time).

DIAG_ROUNDS=N instead builds every variant up front (all in GPU memory: ~35 GB at 32 layers)
and times eager decode (ms a token, from 72- and 8-token calls) in N rounds, the variants
round-robin in each, so that a slow stretch of the host hits every variant alike; prints each
round and the medians against fp16. Run on a GPU:
`SOFTFP8_FP8_DECODE=integer DIAG_LAYERS=32 DIAG_ROUNDS=5 python3 benchmarks/gpu_eager_diag.py`."""
import collections
import gc
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import softfp8  # noqa: E402
from softfp8 import modules
from softfp8.backends.triton import _fastcall
from softfp8.bench.user_path import build_model

stats = collections.Counter()
orig_launch = _fastcall.LayerCall.launch
def launch(self, x):
    y = orig_launch(self, x)
    if y is None:
        why = []
        if not x.is_contiguous(): why.append("noncontig")
        if x.data_ptr() % 16: why.append("align")
        for read, value in zip(self.readers, self.settings):
            if read() != value: why.append(f"setting {value}->{read()}")
        if _fastcall._launch_hook_set(): why.append("hook")
        stats["launch None: " + ",".join(why)] += 1
    else:
        stats["replayed"] += 1
    return y
_fastcall.LayerCall.launch = launch
orig_rec = modules.record_eager
def rec(x, *a, **k):
    r = orig_rec(x, *a, **k)
    stats["record " + ("None" if r is None else ("call None" if r[1] is None
                                              else "ok" if r[1].records_again else "unreplayable")) + f" M={x.numel()//x.shape[-1]}"] += 1
    return r
modules.record_eager = rec
orig_holds = modules._KeptCall.holds
def holds(self, *a):
    r = orig_holds(self, *a); stats[f"holds {r}"] += 1; return r
modules._KeptCall.holds = holds
orig_repl = modules._replayable
def repl(x, b):
    r = orig_repl(x, b); stats[f"_replayable {r}"] += 1; return r
modules._replayable = repl

dev = torch.device(os.environ.get("DIAG_DEVICE", "cuda"))  # cpu: a smoke test of this script
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
LAYERS = int(os.environ.get("DIAG_LAYERS", "4"))
FORMATS = os.environ.get("DIAG_FORMATS", "fp16,e5m2,nvfp4").split(",")
PROFILE = os.environ.get("DIAG_PROFILE", "1") == "1"
ROUNDS = int(os.environ.get("DIAG_ROUNDS", "0"))


def generate_s(model, ids, kw, tokens: int) -> float:
    """Seconds of one greedy generate() of exactly `tokens` new tokens, device work included."""
    sync(); t = time.perf_counter()
    model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
    sync()
    return time.perf_counter() - t


def per_token_ms(model, ids, kw) -> float:
    return (generate_s(model, ids, kw, 72) - generate_s(model, ids, kw, 8)) / 64 * 1e3


if ROUNDS:
    import statistics

    models = {}
    for fmt in FORMATS:
        models[fmt] = build_model("llama2-7b", LAYERS, torch.float16, dev)
        if fmt != "fp16":
            softfp8.quantize_model(models[fmt], fmt, progress=False)
    ids = torch.randint(100, 200, (1, 16), device=dev)
    kw = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    for m in models.values():  # warm-up: recordings, kernels, caches
        for _ in range(2):
            per_token_ms(m, ids, kw)
    stats.clear()
    times = {fmt: [] for fmt in FORMATS}
    for r in range(ROUNDS):
        for fmt, m in models.items():
            times[fmt].append(per_token_ms(m, ids, kw))
        print(f"round {r}: " + ", ".join(f"{f} {times[f][-1]:.2f}" for f in FORMATS), flush=True)
    print(f"counts over the timed rounds: {dict(stats)}")
    base = statistics.median(times[FORMATS[0]])
    for fmt in FORMATS:
        med = statistics.median(times[fmt])
        print(f"== {fmt}: {LAYERS} layers, median {med:.2f} ms a token "
              f"(min {min(times[fmt]):.2f}, max {max(times[fmt]):.2f}), "
              f"{base / med:.2f}x {FORMATS[0]}")
    sys.exit(0)

for fmt in FORMATS:
    model = build_model("llama2-7b", LAYERS, torch.float16, dev)
    if fmt != "fp16":
        softfp8.quantize_model(model, fmt)
    ids = torch.randint(0, 1000, (1, 8), device=dev)
    kw = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    for _ in range(2):
        model.generate(ids, max_new_tokens=16, min_new_tokens=16, **kw)
    stats.clear()
    t1 = generate_s(model, ids, kw, 16)
    t2 = generate_s(model, ids, kw, 48)
    print(f"== {fmt}: {LAYERS} layers, tracked objects {len(gc.get_objects())}, ms/token {(t2 - t1) / 32 * 1e3:.2f}; counts over both: {dict(stats)}")
    before = [g["collections"] for g in gc.get_stats()]
    t4 = generate_s(model, ids, kw, 48)
    print(f"   48 tokens again {t4 * 1e3:.1f} ms, collections by generation "
          f"{[g['collections'] - b for g, b in zip(gc.get_stats(), before)]}")
    gc.disable()
    t3 = generate_s(model, ids, kw, 48)
    gc.enable()
    print(f"   48 tokens {t2 * 1e3:.1f} ms; with the garbage collector off {t3 * 1e3:.1f} ms")
    if not PROFILE:
        del model; torch.cuda.empty_cache() if dev.type == "cuda" else None; continue
    pr = cProfile.Profile(); pr.enable()
    model.generate(ids, max_new_tokens=32, min_new_tokens=32, **kw)
    sync(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print("\n".join(l[:150] for l in s.getvalue().splitlines()[6:34]))
    del model; torch.cuda.empty_cache() if dev.type == "cuda" else None
