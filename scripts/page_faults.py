"""Page faults and system time of a GPT training step, with and without sitp's memory setting.

Usage::

    python scripts/page_faults.py            # runs itself twice: SITP_MALLOC_TUNING=1, then 0

The GPT of chapter 3.5 (4 layers, 4 heads, width 64) at batch 32 x block 32 with
AdamW, one numba thread; after 5 warm-up steps, 20 steps are measured with
``resource.getrusage`` (minor page faults, system and user CPU time) and the wall
clock. ``sitp/kernels/cpu/memory.py`` explains the setting.
"""

import os
import subprocess
import sys

CHILD = """
import resource, time
import numba
numba.set_num_threads(1)
import sitp
from sitp.kernels.cpu import memory as _malloc
from sitp.models import MODELS

spec = MODELS["gpt"]
sitp.manual_seed(0)
model = spec.build(spec.make_config(vocab_size=27, block_size=32, n_layer=4, n_head=4, n_embd=64))
opt = sitp.optim.AdamW(model.parameters(), lr=1e-3)
X, Y = sitp.randint(0, 27, (32, 32)), sitp.randint(0, 27, (32, 32))

def step():
    _, loss = model(X, Y)
    opt.zero_grad()
    loss.backward()
    opt.step()

for _ in range(5):
    step()
n = 20
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
for _ in range(n):
    step()
r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
print(f"| {_malloc.applied} | {(r1.ru_minflt - r0.ru_minflt) / n:,.0f} | "
      f"{1e3 * (r1.ru_stime - r0.ru_stime) / n:.1f} | {1e3 * (r1.ru_utime - r0.ru_utime) / n:.1f} | "
      f"{1e3 * (t1 - t0) / n:.1f} |")
"""


def main() -> int:
    print(
        "GPT step (batch 32 x block 32, AdamW, 1 thread), per step, mean of 20 after 5 warm-up:\n"
    )
    print("| memory setting applied | minor page faults | system ms | user ms | wall ms |")
    print("|---|---:|---:|---:|---:|")
    for value in ("1", "0"):
        env = dict(os.environ, SITP_MALLOC_TUNING=value)
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return out.returncode
        print(out.stdout.strip())
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
