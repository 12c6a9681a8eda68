"""Why eager generate() is slower than `softfp8-bench calls` says: inside generate() of a
llama2-7b-shaped model (DIAG_LAYERS, default 4; DIAG_FORMATS, DIAG_PROFILE=0 to skip the profile), count the recorded calls replayed, the replays refused (and
why) and the recordings made, then profile 32 tokens (cProfile, by own time), for fp16, E5M2
and NVFP4. Run on a GPU: `SOFTFP8_FP8_DECODE=integer python3 benchmarks/gpu_eager_diag.py`."""
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
    stats["record " + ("None" if r is None else ("call None" if r[1] is None else "ok")) + f" M={x.numel()//x.shape[-1]}"] += 1
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

dev = torch.device("cuda")
LAYERS = int(os.environ.get("DIAG_LAYERS", "4"))
FORMATS = os.environ.get("DIAG_FORMATS", "fp16,e5m2,nvfp4").split(",")
PROFILE = os.environ.get("DIAG_PROFILE", "1") == "1"
for fmt in FORMATS:
    model = build_model("llama2-7b", LAYERS, torch.float16, dev)
    if fmt != "fp16":
        softfp8.quantize_model(model, fmt)
    ids = torch.randint(0, 1000, (1, 8), device=dev)
    kw = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    for _ in range(2):
        model.generate(ids, max_new_tokens=16, min_new_tokens=16, **kw)
    stats.clear()
    torch.cuda.synchronize(); t = time.perf_counter()
    model.generate(ids, max_new_tokens=16, min_new_tokens=16, **kw)
    torch.cuda.synchronize(); t1 = time.perf_counter() - t
    torch.cuda.synchronize(); t = time.perf_counter()
    model.generate(ids, max_new_tokens=48, min_new_tokens=48, **kw)
    torch.cuda.synchronize(); t2 = time.perf_counter() - t
    print(f"== {fmt}: {LAYERS} layers, tracked objects {len(gc.get_objects())}, ms/token {(t2 - t1) / 32 * 1e3:.2f}; counts over both: {dict(stats)}")
    before = [g["collections"] for g in gc.get_stats()]
    torch.cuda.synchronize(); t = time.perf_counter()
    model.generate(ids, max_new_tokens=48, min_new_tokens=48, **kw)
    torch.cuda.synchronize(); t4 = time.perf_counter() - t
    print(f"   48 tokens again {t4 * 1e3:.1f} ms, collections by generation "
          f"{[g['collections'] - b for g, b in zip(gc.get_stats(), before)]}")
    gc.disable()
    torch.cuda.synchronize(); t = time.perf_counter()
    model.generate(ids, max_new_tokens=48, min_new_tokens=48, **kw)
    torch.cuda.synchronize(); t3 = time.perf_counter() - t
    gc.enable()
    print(f"   48 tokens {t2 * 1e3:.1f} ms; with the garbage collector off {t3 * 1e3:.1f} ms")
    if not PROFILE:
        del model; torch.cuda.empty_cache(); continue
    pr = cProfile.Profile(); pr.enable()
    model.generate(ids, max_new_tokens=32, min_new_tokens=32, **kw)
    torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print("\n".join(l[:150] for l in s.getvalue().splitlines()[6:34]))
    del model; torch.cuda.empty_cache()
