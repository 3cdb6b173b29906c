"""One trial in this process on the GPU: its peak CUDA memory (allocated, reserved) and seconds."""
import json, os, sys, time
ds, method, conc, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
os.environ["FDA_RAY_CONCURRENT_CLIENTS"] = conc
import torch
from fda_ray import RunConfig, run
dev = "cuda" if torch.cuda.is_available() else "cpu"
kw = dict(dataset=ds, method=method, device=dev, rounds=rounds)
kw.update(json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})
t = time.time()
h = run(RunConfig(**kw))
out = {"dataset": ds, "method": method, "concurrent": conc, "rounds": rounds, "extra": sys.argv[5:], "seconds": round(time.time() - t, 1)}
if dev == "cuda":
    out.update(alloc_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 3),
               reserved_GiB=round(torch.cuda.max_memory_reserved() / 2**30, 3))
print(json.dumps(out), flush=True)
